"""Tests of src/kernel/kernel.js, the JavaScript/TypeScript kernel of a corral context.

Each kernel runs as the agent runs it: `node -e <kernel.js> javascript|typescript`,
fd 0 on /dev/null, fd 3 one end of a socketpair, fds 1 and 2 pipes whose read
ends are the kernel's fds 4 and 5, a sandbox-like environment and a temporary
working directory.  Every frame received is checked with test_kernel's
check_frame, as strictly as the daemon does.

Run with: /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/kernel/test_kernel_js.py
"""
import base64
import json
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_kernel import LanguageKernelClient, error, main_result, merged, ok, results, source, stream# noqa: E402

NODE = "/usr/bin/node"
TIMEOUT = 60  # a bound on a hang, never a synchronisation


class JsKernelClient(LanguageKernelClient):
    """Starts kernel.js the way the agent does and talks to it."""

    def __init__(self, tmp_path, language="javascript"):
        super().__init__(tmp_path)
        self.language = language

    def argv(self):
        return [NODE, "-e", source("kernel.js"), self.language]

    def value(self, code):
        """The text/plain of a cell's main result (the cell must succeed)."""
        return main_result(ok(self.execute(code)))["data"]["text/plain"]

    interrupt = LanguageKernelClient.interrupt_until_done


def wait_for_file(path):
    """Polls for a file a cell creates (bounded: a hang fails the test)."""
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        assert time.monotonic() < deadline, path
        time.sleep(0.01)


# A cell that waits until the test creates this file (no timing involved).
WAIT_FOR = ("await new Promise(r => { const t = setInterval(() => { "
            "if (require('fs').existsSync(%r)) { clearInterval(t); r(); } }, 5); });")


@pytest.fixture(scope="module")
def js(tmp_path_factory):
    k = JsKernelClient(tmp_path_factory.mktemp("js")).start()
    yield k
    assert k.close() == 0


@pytest.fixture(scope="module")
def tsk(tmp_path_factory):
    k = JsKernelClient(tmp_path_factory.mktemp("ts"), "typescript").start()
    yield k
    assert k.close() == 0


@pytest.fixture
def fresh(tmp_path):
    k = JsKernelClient(tmp_path).start()
    yield k
    k.close()


# ---------------------------------------------------------------------------


def test_ready_frames(js, tsk):
    node = subprocess.run([NODE, "-p", "process.versions.node"], capture_output=True, text=True)
    assert js.ready == {"type": "ready", "language": "javascript", "version": node.stdout.strip()}
    assert tsk.ready == {"type": "ready", "language": "typescript", "version": node.stdout.strip()}


def test_execution_count_counts_every_execution(fresh):
    frames = fresh.execute("1")
    assert frames[-1]["execution_count"] == 1
    assert merged(frames) == []  # no warning of the kernel's own
    assert fresh.execute("throw 1")[-1]["execution_count"] == 2
    assert fresh.execute("3")[-1]["execution_count"] == 3


def test_state_persists_across_cells(js):
    frames = ok(js.execute("let a = 1; const b = 2; var c = 3;\n"
                           "function f(x) { return x * 10 }\nclass K { get v() { return 'k' } }"))
    assert results(frames) == []
    assert js.value("[a, b, c, f(4), new K().v]") == "[ 1, 2, 3, 40, 'k' ]"
    assert js.value("a += 1; a") == "2"


def test_cells_declaring_a_name_again_can_be_run_again(js):
    for n in (1, 2):
        ok(js.execute("const again = %d; let other = 'x%d'; class Again {}" % (n, n)))
        assert js.value("[again, other, typeof Again]") == "[ %d, 'x%d', 'function' ]" % (n, n)


def test_cells_may_shadow_the_globals_the_kernel_uses(fresh):
    ok(fresh.execute("let process = 'mine', JSON = 1, Buffer = 2, Promise = 3, globalThis = 4, require = 5"))
    frames = ok(fresh.execute("console.log('still'); [process, JSON, Buffer, Promise, globalThis, require]"))
    assert stream(frames) == "still\n"
    assert main_result(frames)["data"]["text/plain"] == "[ 'mine', 1, 2, 3, 4, 5 ]"
    assert main_result(ok(fresh.execute("function g() { return 'g' }\nawait 0; g()")))["data"] == \
        {"text/plain": "'g'"}


def test_esm_packages_and_relative_modules(js):
    pkg = js.cwd / "node_modules" / "esmonly"
    pkg.mkdir(parents=True)
    (pkg / "package.json").write_text(json.dumps(
        {"name": "esmonly", "type": "module", "exports": {"import": "./index.js"}}))
    (pkg / "index.js").write_text("export const hello = 'esm';\nexport default 'dflt';\n")
    (js.cwd / "mod.mjs").write_text("export const rel = 'relative';\n")
    frames = ok(js.execute("import d, { hello } from 'esmonly';\nimport { rel } from './mod.mjs';\n"
                           "[d, hello, rel]"))
    assert main_result(frames)["data"]["text/plain"] == "[ 'dflt', 'esm', 'relative' ]"


def test_a_name_may_change_from_let_to_var_and_back(js):
    ok(js.execute("let lv = 1"))
    assert js.value("var lv = 2; lv") == "2"
    ok(js.execute("var vl = 1"))
    assert js.value("let vl = 3; vl") == "3"
    assert js.value("await 0; var lv = 4; function vl() {}; lv") == "4"


def test_last_expression_is_the_main_result(js):
    frames = ok(js.execute("const o = {s: 'text', n: [1, 2]};\no"))
    result = main_result(frames)
    assert result["data"] == {"text/plain": "{ s: 'text', n: [ 1, 2 ] }"}
    assert js.value("'quoted'") == "'quoted'"
    assert js.value("1 + 1;") == "2"  # as Node's REPL: `;` does not hide the value
    assert js.value("{ a: 1 }") == "{ a: 1 }"  # an object, not a block
    assert js.value("new Map([[1, 'one']])") == "Map(1) { 1 => 'one' }"


def test_underscore_is_the_last_result_until_assigned(fresh):
    ok(fresh.execute("6 * 7"))
    assert main_result(ok(fresh.execute("_ + 1")))["data"]["text/plain"] == "43"
    ok(fresh.execute("_ = 'mine'"))
    ok(fresh.execute("1"))
    assert main_result(ok(fresh.execute("_")))["data"]["text/plain"] == "'mine'"


def test_undefined_gives_no_result(js):
    assert results(ok(js.execute("undefined"))) == []
    assert results(ok(js.execute("let nothing = 5"))) == []
    assert results(ok(js.execute("console.log('x')"))) == []


def test_console_streams_in_order(js):
    frames = ok(js.execute(
        "console.log('one'); console.error('two'); console.info('three');\n"
        "console.warn('four'); process.stdout.write('five\\n'); process.stderr.write('six\\n');\n"
        "console.debug({d: 1}); console.table([{x: 1}]); console.dir([1])"))
    out = merged(frames)
    assert out[:5] == [("stdout", "one\n"), ("stderr", "two\n"), ("stdout", "three\n"),
                       ("stderr", "four\n"), ("stdout", "five\n")]
    assert out[5] == ("stderr", "six\n")
    assert out[6][0] == "stdout" and out[6][1].startswith("{ d: 1 }\n")
    assert "(index)" in out[6][1] and out[6][1].endswith("[ 1 ]\n")


def test_output_is_sent_while_the_cell_runs(js, tmp_path):
    flag = tmp_path / "go-on"
    eid = js.send_execute("console.log('first');\n" + WAIT_FOR % str(flag) +
                          "\nconsole.log('second')")
    first = js.recv()
    assert (first["type"], first["text"]) == ("stream", "first\n")
    flag.touch()  # only now may the cell write 'second'
    frames = js.wait_done(eid)
    assert stream(frames) == "second\n"
    assert first["id"] == eid


def test_partial_lines_are_sent_without_a_newline(js, tmp_path):
    flag = tmp_path / "partial-seen"
    eid = js.send_execute("process.stdout.write('partial');\n" + WAIT_FOR % str(flag) + "\n'end'")
    first = js.recv()
    assert (first["type"], first["text"]) == ("stream", "partial")
    flag.touch()
    assert main_result(ok(js.wait_done(eid)))["data"]["text/plain"] == "'end'"


def test_top_level_await(js):
    assert js.value("await new Promise(r => setTimeout(() => r(42), 10))") == "42"
    assert js.value("const p = Promise.resolve('v');\nawait p") == "'v'"
    # a promise as the value is shown as a promise, as Node's REPL does
    assert js.value("Promise.resolve(1)") == "Promise { 1 }"
    frames = ok(js.execute("let sum = 0;\nfor await (const x of [Promise.resolve(1), 2]) sum += x;\nsum"))
    assert main_result(frames)["data"]["text/plain"] == "3"


def test_declarations_after_await_stay_global(js):
    ok(js.execute("const later = await Promise.resolve(5);\nvar v2 = later * 2;\n"
                  "function hoisted() { return 'h' + later }\nclass AfterAwait { static x = 7 }\n"
                  "let { da, db } = { da: 1, db: 2 };"))
    assert js.value("[later, v2, hoisted(), AfterAwait.x, da, db]") == "[ 5, 10, 'h5', 7, 1, 2 ]"
    assert js.value("early(); function early() { return 'before its definition' }; await 0; early()") \
        == "'before its definition'"


def test_errors_carry_name_message_and_stack(js):
    err = error(js.execute("let n = null;\nn.prop"))
    assert err["name"] == "TypeError"
    assert "Cannot read properties of null" in err["value"]
    assert err["traceback"].startswith("TypeError: " + err["value"])
    assert ":2:" in err["traceback"]  # the line in the cell
    assert "[eval]" not in err["traceback"] and "node:vm" not in err["traceback"]
    err = error(js.execute("class MyError extends Error { constructor(m) { super(m); this.name = 'MyError' } }\n"
                           "throw new MyError('mine')"))
    assert (err["name"], err["value"]) == ("MyError", "mine")
    err = error(js.execute("await Promise.reject(new RangeError('async'))"))
    assert (err["name"], err["value"]) == ("RangeError", "async")


def test_stack_positions_are_the_cells(js):
    frames = js.execute("const before = await Promise.resolve(1);\nnull.y")
    n = frames[-1]["execution_count"]
    assert error(frames)["traceback"].endswith("\n    at cell%d:2:6" % n)
    frames = js.execute("function thrower() {\n  throw new Error('deep')\n}\nthrower()")
    n = frames[-1]["execution_count"]
    assert error(frames)["traceback"] == \
        "Error: deep\n    at thrower (cell%d:2:9)\n    at cell%d:4:1" % (n, n)


def test_non_error_throws(js):
    err = error(js.execute("throw 'a string'"))
    assert (err["name"], err["value"], err["traceback"]) == ("Uncaught", "a string", "Uncaught 'a string'")
    err = error(js.execute("throw 42"))
    assert (err["name"], err["value"]) == ("Uncaught", "42")
    err = error(js.execute("throw {code: 7}"))
    assert (err["name"], err["value"]) == ("Uncaught", "{ code: 7 }")


def test_syntax_errors(js):
    frames = js.execute("let q = ;")
    err = error(frames)
    assert err["name"] == "SyntaxError"
    assert err["value"] == "Unexpected token ';'"
    # the cell's line and where, and none of the kernel's frames that compiled it
    assert err["traceback"] == ("cell%d:1\nlet q = ;\n" % frames[-1]["execution_count"] +
                                " " * 8 + "^\n\nSyntaxError: Unexpected token ';'")
    # a SyntaxError the cell's code throws keeps the cell's frames
    err = error(js.execute("JSON.parse('{')"))
    assert err["name"] == "SyntaxError"
    assert "at JSON.parse" in err["traceback"] and "node:" not in err["traceback"]
    err = error(js.execute("await 1;\nfunction ("))
    assert err["name"] == "SyntaxError"
    assert js.value("'still fine'") == "'still fine'"


def test_require(js):
    assert js.value("require('path').join('a', 'b')") == "'a/b'"
    assert js.value("require('node:os').EOL") == "'\\n'"
    # Debian's module folder is searched: /usr/share/nodejs/acorn
    assert js.value("const acorn = require('acorn');\nacorn.parse('1', {ecmaVersion: 2020}).type") == \
        "'Program'"


def test_require_from_the_working_directory(js):
    pkg = js.cwd / "node_modules" / "localpkg"
    pkg.mkdir(parents=True)
    (pkg / "index.js").write_text("module.exports = { who: 'local' };\n")
    (js.cwd / "helper.js").write_text("exports.twice = (x) => 2 * x;\n")
    assert js.value("require('localpkg').who") == "'local'"
    assert js.value("require('./helper').twice(21)") == "42"


def test_static_imports_are_rewritten(js):
    frames = ok(js.execute("import path from 'path';\nimport { parse } from 'acorn';\n"
                           "import * as osm from 'node:os';\nimport { join as j } from 'path';\n"
                           "[path.sep, typeof parse, typeof osm.cpus, j('x', 'y')]"))
    assert main_result(frames)["data"]["text/plain"] == "[ '/', 'function', 'function', 'x/y' ]"
    assert js.value("typeof parse") == "'function'"  # imports are global bindings
    assert js.value("(await import('acorn')).version.split('.').length") == "3"


def test_display(js):
    frames = ok(js.execute(
        "display.html('<b>bold</b>');\n"
        "display.png(Buffer.from('89504e470d0a1a0a', 'hex'));\n"
        "display.markdown('# title'); display.svg('<svg></svg>');\n"
        "display.json({k: [1, 2]});\n"
        "display({'text/html': '<i>i</i>', 'text/plain': 'i'});\n"
        "display([1, 2]);\n"
        "'main'"))
    shown = results(frames, False)
    assert [r["data"].get("text/html") for r in shown[:1]] == ["<b>bold</b>"]
    assert base64.b64decode(shown[1]["data"]["image/png"]) == b"\x89PNG\r\n\x1a\n"
    assert shown[2]["data"]["text/markdown"] == "# title"
    assert shown[3]["data"]["image/svg+xml"] == "<svg></svg>"
    assert shown[4]["data"]["application/json"] == {"k": [1, 2]}
    assert shown[5]["data"] == {"text/html": "<i>i</i>", "text/plain": "i"}
    assert shown[6]["data"] == {"text/plain": "[ 1, 2 ]"}
    assert all("text/plain" in r["data"] for r in shown)
    assert main_result(frames)["data"]["text/plain"] == "'main'"
    assert frames.index(shown[-1]) < frames.index(main_result(frames))
    err = error(js.execute("display({'text/x-unknown': 'x'})"))
    assert err["name"] == "TypeError"


def test_values_the_daemon_cannot_parse_are_replaced(js):
    frames = ok(js.execute("console.log('a\\ud800b\\u0000c'); display.text('é\\udc00'); 'é\\udc00'"))
    assert stream(frames) == "a\ufffdb\ufffdc\n"
    assert results(frames, False)[0]["data"]["text/plain"] == "é\ufffd"
    assert main_result(frames)["data"]["text/plain"] == "'é\\udc00'"  # util.inspect escapes it
    frames = ok(js.execute("display.json({big: 1e20, n: 12345678901234567890n > 0n})"))
    assert results(frames)[0]["data"]["application/json"] == {"big": 1e20, "n": True}


def test_child_process_output_through_the_descriptors(js):
    frames = ok(js.execute(
        "const cp = require('child_process');\n"
        "console.log('before');\n"
        "cp.execSync('echo from-child; echo child-err >&2', {stdio: 'inherit'});\n"
        "console.log('after'); 7"))
    assert merged(frames) == [("stdout", "before\nfrom-child\n"), ("stderr", "child-err\n"),
                              ("stdout", "after\n")]
    assert main_result(frames)["data"]["text/plain"] == "7"
    frames = ok(js.execute("require('fs').writeSync(1, 'raw fd\\n'); cp.spawnSync('printf', ['x'], {stdio: 'inherit'}); 0"))
    assert stream(frames) == "raw fd\nx"


def test_big_output_arrives_complete(js):
    frames = ok(js.execute("console.log('x'.repeat(3000000)); for (let i = 0; i < 20000; i++) console.log(i)"))
    assert stream(frames) == "x" * 3000000 + "\n" + "".join("%d\n" % i for i in range(20000))
    frames = ok(js.execute("require('child_process').execSync('seq 1 200000', {stdio: 'inherit'}); 1"))
    assert stream(frames) == "".join("%d\n" % i for i in range(1, 200001))


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_output_waits_for_the_daemon(fresh):
    ok(fresh.execute("'x'.repeat(1e6).length"))
    before = rss_mib(fresh.proc.pid)
    eid = fresh.send_execute("for (let i = 0; i < 100; i++) console.log('y'.repeat(1e6))")
    time.sleep(1.5)  # the test does not read: the kernel must wait, not buffer
    assert rss_mib(fresh.proc.pid) - before < 60
    assert len(stream(fresh.wait_done(eid))) == 100 * 1000001


def test_env_is_applied_then_restored(js):
    code = "[process.env.CORRAL_T, process.env.HOME]"
    frames = ok(js.execute(code, env={"CORRAL_T": "v1", "HOME": "/elsewhere"}))
    assert main_result(frames)["data"]["text/plain"] == "[ 'v1', '/elsewhere' ]"
    assert js.value(code) == "[ undefined, %r ]" % str(js.home)
    frames = ok(js.execute("require('child_process').execSync('echo $CORRAL_T', {encoding: 'utf8'})",
                           env={"CORRAL_T": "child-sees-it"}))
    assert main_result(frames)["data"]["text/plain"] == "'child-sees-it\\n'"


def test_environ_sets_for_good(js):
    js.send({"type": "environ", "env": {"CORRAL_E": "kept", "USER": None}})
    assert js.value("[process.env.CORRAL_E, 'USER' in process.env]") == "[ 'kept', false ]"
    assert js.value("process.env.CORRAL_E") == "'kept'"


def test_warm(fresh):
    fresh.send({"type": "warm"})
    assert fresh.recv() == {"type": "done", "id": 0, "execution_count": 0, "status": "ok"}
    frames = fresh.execute("1")
    assert frames[-1]["execution_count"] == 1
    assert merged(frames) == []  # no warning of the kernel's own


def test_unhandled_rejections_and_callback_errors_do_not_kill_the_kernel(js, tmp_path):
    frames = ok(js.execute("Promise.reject(new Error('nobody catches me')); 1"))
    assert "nobody catches me" in stream(frames, "stderr")
    flag = tmp_path / "thrown"
    ok(js.execute("setTimeout(() => { require('fs').writeFileSync(%r, ''); throw new Error('in a timer') }, 10)"
                  % str(flag)))
    wait_for_file(flag)
    frames = ok(js.execute("'alive'"))
    assert main_result(frames)["data"]["text/plain"] == "'alive'"
    assert "in a timer" in stream(frames, "stderr")  # sent with the next execution
    assert js.proc.poll() is None


def test_output_of_callbacks_after_the_cell_goes_to_the_next_execution(js, tmp_path):
    flag = tmp_path / "late"
    ok(js.execute("setTimeout(() => { console.log('late'); require('fs').writeFileSync(%r, '') }, 10); 0"
                  % str(flag)))
    wait_for_file(flag)
    assert stream(ok(js.execute("'next'"))) == "late\n"


def test_interrupt_a_busy_loop(js):
    ok(js.execute("let survivor = 'still here'"))
    eid = js.send_execute("console.log('go'); while (true) {}")
    assert js.recv()["text"] == "go\n"
    err = error(js.interrupt(eid))
    assert err["name"] == "Interrupted"
    assert "SIGINT" in err["value"]
    assert js.value("survivor") == "'still here'"


def test_interrupt_a_pending_await(js):
    eid = js.send_execute("console.log('waiting'); await new Promise(() => {})")
    assert js.recv()["text"] == "waiting\n"
    assert error(js.interrupt(eid))["name"] == "Interrupted"
    eid = js.send_execute("const sleep = (ms) => new Promise(r => setTimeout(r, ms));\n"
                          "await null; console.log('sleeping'); await sleep(1e6)")  # the script has ended
    assert js.recv()["text"] == "sleeping\n"
    assert error(js.interrupt(eid))["name"] == "Interrupted"
    assert js.value("survivor + ' after await'") == "'still here after await'"


def test_interrupt_a_busy_loop_after_an_await(js):
    eid = js.send_execute("await new Promise(r => setTimeout(r, 10));\n"
                          "console.log('spinning'); for (;;) {}")
    assert js.recv()["text"] == "spinning\n"
    assert error(js.interrupt(eid))["name"] == "Interrupted"
    eid = js.send_execute("await null; const t0 = Date.now(); console.log('spin');\n"
                          "while (Date.now() - t0 < 1e9) {}")
    assert js.recv()["text"] == "spin\n"
    assert error(js.interrupt(eid))["name"] == "Interrupted"
    assert js.value("survivor") == "'still here'"


def test_interrupt_a_synchronous_child(js):
    eid = js.send_execute("require('child_process').execSync('echo started; sleep 30', {stdio: 'inherit'})")
    assert js.recv()["text"] == "started\n"  # from the child: the call is under way
    assert error(js.interrupt(eid))["name"] == "Interrupted"
    # a child that ignores SIGINT gets SIGKILL at the next interrupt
    eid = js.send_execute("await null;\nrequire('child_process').spawnSync('bash', "
                          "['-c', 'trap \"\" INT; echo deaf; sleep 30'], {stdio: 'inherit'})")
    assert js.recv()["text"] == "deaf\n"
    assert error(js.interrupt(eid))["name"] == "Interrupted"
    assert js.value("survivor") == "'still here'"


def test_an_interrupted_synchronous_child_throws_in_the_cell(js):
    eid = js.send_execute("try {\n  require('child_process').execSync('echo started; sleep 30', {stdio: 'inherit'})\n"
                          "} catch (e) { console.log('caught', e.name) }\n'after'")
    assert js.recv()["text"] == "started\n"
    frames = ok(js.interrupt(eid))
    assert stream(frames) == "caught Interrupted\n"
    assert main_result(frames)["data"]["text/plain"] == "'after'"


def test_interrupt_frees_a_kernel_blocked_by_a_callback(js, tmp_path):
    flag = tmp_path / "spinning"
    ok(js.execute("setTimeout(() => { require('fs').writeFileSync(%r, ''); for (;;) {} }, 10); 0"
                  % str(flag)))
    wait_for_file(flag)
    eid = js.send_execute("'served'")  # waits for the busy callback
    frames = js.interrupt(eid)
    assert main_result(ok(frames))["data"]["text/plain"] == "'served'"
    assert js.value("survivor") == "'still here'"


def test_sigint_while_idle_is_ignored(js):
    for _ in range(3):
        os.kill(js.proc.pid, signal.SIGINT)
    assert js.value("6 * 7") == "42"
    assert js.proc.poll() is None


@pytest.mark.parametrize("code", ["process.exit(3)", "process.exit()", "await null; process.exit(0)"])
def test_process_exit_does_not_end_the_kernel(js, code):
    err = error(js.execute("let keep = 1;\n" + code))
    assert err["name"] == "ProcessExit"
    assert js.proc.poll() is None
    assert js.value("keep") == "1"


def test_sigint_listeners_of_cells_do_not_take_interrupts_away(fresh):
    ok(fresh.execute("let got = 0; process.on('SIGINT', () => { got++ })"))
    eid = fresh.send_execute("console.log('loop'); while (true) {}")
    assert fresh.recv()["text"] == "loop\n"
    assert error(fresh.interrupt(eid))["name"] == "Interrupted"
    # logged after the script ran: the SIGINT reaches the event loop
    eid = fresh.send_execute("await null; console.log('wait'); await new Promise(() => {})")
    assert fresh.recv()["text"] == "wait\n"
    assert error(fresh.interrupt(eid))["name"] == "Interrupted"
    assert int(fresh.value("got")) >= 1  # the listener hears what reaches the event loop


def test_frames_split_and_joined(fresh):
    bodies = [json.dumps({"type": "execute", "id": i, "code": "%d * 2" % i}).encode() for i in (1, 2)]
    data = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
    junk = b'{"type":"nonsense"}'
    data = len(junk).to_bytes(4, "big") + junk + data
    for i in range(len(data)):  # byte by byte: split everywhere
        fresh.sock.sendall(data[i:i + 1])
    assert main_result(fresh.wait_done(1))["data"]["text/plain"] == "2"
    assert main_result(fresh.wait_done(2))["data"]["text/plain"] == "4"


def test_a_big_cell(js):
    assert js.value("const bigText = '" + "a" * 8_000_000 + "';\nbigText.length") == "8000000"


def test_a_result_or_an_error_too_large_for_a_frame_is_cut(js):
    # the daemon refuses frames above 32 MiB: such a frame would end the kernel
    limit = 32 << 20
    big = js.execute("let keptBig = 7; display({'text/html': 'x'.repeat(40e6), 'text/plain': 'big'})")
    shown = results(ok(big))
    assert len(shown) == 1 and set(shown[0]["data"]) == {"text/plain"}
    assert shown[0]["data"]["text/plain"] == "big\n[corral: output too large for one frame, truncated]"
    thrown = error(js.execute("throw new Error('e'.repeat(40e6))"))
    assert thrown["value"].endswith("[corral: output too large for one frame, truncated]")
    assert len(json.dumps(thrown)) < limit
    assert js.value("keptBig") == "7"


def test_eof_ends_the_kernel_and_its_children(fresh):
    frames = ok(fresh.execute("const child = require('child_process').spawn('sleep', ['1000']); child.pid"))
    pid = int(main_result(frames)["data"]["text/plain"])
    assert fresh.close() == 0
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        assert state == "Z"  # killed, not yet reaped
    except FileNotFoundError:
        pass


# --- TypeScript ---------------------------------------------------------------


def test_typescript_types_generics_enums(tsk):
    frames = ok(tsk.execute(
        "interface Point { x: number; y: number }\n"
        "function first<T>(items: T[]): T { return items[0] }\n"
        "enum Color { Red, Green = 5 }\n"
        "type Name = string;\n"
        "const pts: Point[] = [{ x: 1, y: 2 }];\n"
        "const who: Name = 'ts' as Name;\n"
        "[first<Point>(pts).y, Color.Green, Color[5], who]"))
    assert main_result(frames)["data"]["text/plain"] == "[ 2, 5, 'Green', 'ts' ]"
    assert tsk.value("pts.length + (Color.Red as number)") == "1"


def test_typescript_classes_await_and_imports(tsk):
    frames = ok(tsk.execute(
        "import type { Node } from 'acorn';\nimport { parse } from 'acorn';\n"
        "class Box<T> { constructor(private readonly v: T) {} get(): T { return this.v } }\n"
        "const n: number = await Promise.resolve(3);\n"
        "new Box<number>(n).get() + (parse('1', { ecmaVersion: 2020 }) as any).body.length"))
    assert main_result(frames)["data"]["text/plain"] == "4"
    assert tsk.value("new Box('again').get()") == "'again'"


def test_typescript_stack_positions_are_the_cells(tsk):
    frames = tsk.execute("interface Shape { area(): number }\nenum Kind { A, B }\n"
                         "function fail(s: Shape): number {\n  const none: any = null;\n"
                         "  return none.area;\n}\nfail({ area: () => 1 })")
    n = frames[-1]["execution_count"]
    assert error(frames)["traceback"].endswith(
        "\n    at fail (cell%d:5:15)\n    at cell%d:7:1" % (n, n))


def test_typescript_syntax_error(tsk):
    frames = tsk.execute("let broken: number = ;")
    err = error(frames)
    assert err["name"] == "SyntaxError"
    assert err["value"] == "Expression expected. (1:22)"
    assert err["traceback"] == ("cell%d:1\nlet broken: number = ;\n" % frames[-1]["execution_count"] +
                                " " * 21 + "^\n\nSyntaxError: Expression expected. (1:22)")
    assert tsk.value("1 as number") == "1"


def test_typescript_has_no_type_checking(tsk):
    assert tsk.value("const s: number = 'not a number' as any as number; s") == "'not a number'"
    err = error(tsk.execute("const u: string = undefined as any; u.length"))
    assert err["name"] == "TypeError"
