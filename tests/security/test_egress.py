"""Network egress (`corral run --network off|internet|policy`): what a
sandbox reaches, and what it never does, whatever its mode.

Everything runs against a test network of the test's own (EgressNet in
conftest.py): a namespace with web servers on 10.233.N.2, .3 and
[fd10:233:N::2], a DNS server on .2 that corral's DNS stub forwards to, the
host's end of the veth pair on .1 and fd10:233:N::1 (addresses of the host's
own), and a server on the host's 127.0.0.1. Both sides are checked: what the
probe saw (errno names, never timings) and what reached the servers (their
counters). Nothing outside 127.0.0.0/8, 10.233.0.0/16 and fd10:233::/32 is
contacted, save what corral must refuse itself: 169.254.169.254 (cloud
metadata) and 2001:db8::1 (reserved for documentation, never routed).

Each probe is one sandbox running a list of steps (STEPS below) and emitting
every step's outcome, keyed by the step's label."""

import re

import pytest

from helpers import CONFIG, TEMPLATE, run

PROBE = r'''
import socket, struct, random
T = 5
EAI = {getattr(socket, n): n for n in dir(socket) if n.startswith("EAI_")}

def err(e):
    if isinstance(e, socket.gaierror):
        return "gaierror:" + EAI.get(e.args[0], str(e.args[0]))
    return ename(e.errno) if e.errno else type(e).__name__

def resolve(name):
    """The addresses name resolves to (sorted), or gaierror:EAI_..."""
    try:
        infos = socket.getaddrinfo(name, 80, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except OSError as e:
        return err(e)
    return sorted({i[4][0] for i in infos})

def http(target, port=80, host=None):
    """GET / from target (a name or an address): body:BODY or an error."""
    try:
        fam, _, _, _, sa = socket.getaddrinfo(target, port, socket.AF_UNSPEC,
                                              socket.SOCK_STREAM)[0]
    except OSError as e:
        return err(e)
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(T)
    try:
        s.connect(sa)
        s.sendall(("GET / HTTP/1.0\r\nHost: %s\r\n\r\n" % (host or target)).encode())
        data = b""
        while len(data) < 65536:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return "body:" + data.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")
    except OSError as e:
        return err(e)
    finally:
        s.close()

def connect(addr, port):
    """connected:WHAT_THE_SERVER_SENT or an errno name."""
    s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
    s.settimeout(T)
    try:
        s.connect((addr, port))
        return "connected:" + s.recv(100).decode(errors="replace")
    except OSError as e:
        return err(e)
    finally:
        s.close()

def dns_query(server, name, tcp=False):
    """An A query for name sent straight to server:53: {"rcode", "a"}."""
    qid = random.randrange(65536)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM)
    s.settimeout(T)
    try:
        s.connect((server, 53))
        if tcp:
            s.sendall(struct.pack(">H", len(q)) + q)
            data = b""
            while len(data) < 2 or len(data) < 2 + struct.unpack(">H", data[:2])[0]:
                chunk = s.recv(4096)
                if not chunk:
                    return "closed"
                data += chunk
            a = data[2:]
        else:
            s.send(q)
            a = s.recv(4096)
    except OSError as e:
        return err(e)
    finally:
        s.close()
    rid, flags, qd, an = struct.unpack_from(">HHHH", a)
    if rid != qid:
        return "wrong id"
    off = 12
    for _ in range(qd):
        while a[off] and not a[off] & 0xc0:
            off += 1 + a[off]
        off += (2 if a[off] & 0xc0 else 1) + 4
    addrs = []
    for _ in range(an):
        while a[off] and not a[off] & 0xc0:
            off += 1 + a[off]
        off += 2 if a[off] & 0xc0 else 1
        rtype, _, _, rdlen = struct.unpack_from(">HHIH", a, off)
        off += 10
        if rtype == 1:
            addrs.append(socket.inet_ntoa(a[off:off + 4]))
        off += rdlen
    return {"rcode": flags & 0xf, "a": sorted(addrs)}

def tls(target, sni, port=80):
    """A TLS handshake with server name sni to target (a name or an
    address): its outcome, or the error that ended it."""
    import ssl
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        s = socket.create_connection((target, port), timeout=T)
    except OSError as e:
        return err(e)
    try:
        ctx.wrap_socket(s, server_hostname=sni).close()
        return "handshake"
    except ssl.SSLError as e:
        return "ssl:" + type(e).__name__
    except OSError as e:
        return err(e)
    finally:
        s.close()

def hello(name, frag=16384, pad=0):
    """A TLS ClientHello asking for name (None: no server_name), with pad
    bytes of padding, in handshake records of frag bytes each."""
    ext = struct.pack(">HHHH", 10, 4, 2, 0x1d)
    if pad:
        ext += struct.pack(">HH", 21, pad) + bytes(pad)
    if name:
        n = name.encode()
        ext += struct.pack(">HHHBH", 0, len(n) + 5, len(n) + 3, 0, len(n)) + n
    body = (b"\3\3" + bytes(32) + b"\0" + b"\0\2\x13\x01" + b"\1\0"
            + struct.pack(">H", len(ext)) + ext)
    hs = b"\1" + len(body).to_bytes(3, "big") + body
    return b"".join(b"\x16\3\1" + struct.pack(">H", len(hs[i:i + frag])) + hs[i:i + frag]
                    for i in range(0, len(hs), frag))

def raw(target, data, shut=True, port=80):
    """data sent to target:port (then, with shut, the end of what is sent),
    and what comes back until the server's end: reply:TEXT, or the error
    that ended it (a generous timeout: the proxy's own deadline is 5 s)."""
    try:
        s = socket.create_connection((target, port), timeout=30)
    except OSError as e:
        return err(e)
    try:
        s.sendall(data)
        if shut:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError as e:
                # reset already, between sendall and here (the proxy is at
                # a higher priority than the sandbox): recv reports it
                if e.errno != errno.ENOTCONN:
                    raise
        got = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        return "reply:" + got.decode(errors="replace")
    except OSError as e:
        return err(e)
    finally:
        s.close()

def udp(addr, port):
    """A datagram to addr:port on a connected socket, then a read: the first
    error (EPERM at once, or ECONNREFUSED from the rejection), or what came."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(T)
    try:
        s.connect((addr, port))
        s.send(b"corral egress test")
        s.send(b"corral egress test")
        return "reply:" + s.recv(100).decode(errors="replace")
    except OSError as e:
        return err(e)
    finally:
        s.close()

def udp_sendto(addr, port):
    """A datagram on an unconnected socket: sendto's outcome."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"corral egress test", (addr, port))
        return "sent"
    except OSError as e:
        return err(e)
    finally:
        s.close()

def opened(family, kind, proto=0):
    try:
        socket.socket(family, kind, proto).close()
        return "opened"
    except OSError as e:
        return err(e)

def ping(addr):
    """An ICMP echo through a ping socket (if the sandbox may open one)."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    except OSError as e:
        return err(e)
    s.settimeout(T)
    try:
        s.sendto(struct.pack(">BBHHH", 8, 0, 0, 0, 1) + b"corral", (addr, 0))
        s.recv(100)
        return "reply"
    except OSError as e:
        return err(e)
    finally:
        s.close()

STEPS = {"resolve": resolve, "http": http, "connect": connect, "dns": dns_query, "tls": tls,
         "hello": lambda target, sni, frag, pad=0: raw(target, hello(sni, frag, pad)),
         "send": lambda target, text: raw(target, text.encode()),
         "silent": lambda target: raw(target, b"", shut=False),
         "udp": udp, "udp_sendto": udp_sendto, "ping": ping,
         "raw4": lambda: opened(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
         "raw6": lambda: opened(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6),
         "packet": lambda: opened(socket.AF_PACKET, socket.SOCK_RAW),
         "interfaces": lambda: sorted(n for _, n in socket.if_nameindex())}
out = {"hostname": socket.gethostname()}
for label, kind, *args in P["steps"]:
    out[label] = STEPS[kind](*args)
emit(**out)
'''


def probe(net, tmp_path, steps, *opts, allow_private=True, modes=None, host_addresses=(),
          wrap=()):
    """Runs steps in one sandbox with opts (the --network options); corral's
    configuration names the test's DNS server and, with allow_private, opens
    10.233.0.0/16 and fd10:233::/32; host_addresses become its
    network.host_addresses; corral runs under wrap. Returns (Result,
    outcomes by label)."""
    cfg = tmp_path / "corral.yaml"
    lines = ["network:",
             f"  modes: [{', '.join(modes or ('off', 'internet', 'policy'))}]",
             f'  dns: ["{net.a2}"]']
    if allow_private:
        lines.append('  allow_private: ["10.233.0.0/16", "fd10:233::/32"]')
    if host_addresses:
        lines.append(f"  host_addresses: [{', '.join(host_addresses)}]")
    text = "\n".join(lines) + "\n"
    if TEMPLATE:
        # Forked mode: the template must be defined here too.
        if CONFIG:
            with open(CONFIG) as f:
                text += f.read()
        else:
            text += f"templates:\n  {TEMPLATE}:\n    preload: []\n"
    cfg.write_text(text)
    r = run(PROBE, *opts, params={"steps": steps}, config=str(cfg), wrap=wrap, timeout=120)
    return r, (r.probe if r.rc == 0 else None)


def sandbox_prefix(outcome):
    """The sandbox's id, as far as its hostname (corral-ID[:12]) tells it."""
    host = outcome["hostname"]
    assert host.startswith("corral-"), host
    return host[len("corral-"):]


def denials(r):
    return [l for l in r.err.splitlines() if "egress" in l]


def assert_logged(r, outcome, what):
    """corral logged the denial of `what` (ADDR:PORT or a name), with the
    sandbox's id, on its stderr."""
    sid = sandbox_prefix(outcome)
    pattern = r"(?<![\w.])" + re.escape(what) + r"(?!\w)"
    hits = [l for l in denials(r) if sid in l and re.search(pattern, l)]
    assert hits, f"no egress denial of {what} logged for sandbox {sid}\n{r}"


def body(net, addr, host):
    return f"body:{net.token} {addr} {host}"


def http_counts(net, some=None):
    """The web servers' connection counts: those of `some`, else 0."""
    return {a: (some or {}).get(a, 0) for a in (net.a2, net.a3, net.a2_6)}


REFUSED = "ECONNREFUSED"


# ---- off ----

def test_off(egress_net, loopback_server, tmp_path):
    """Loopback only: no name resolves, nothing beyond is routed."""
    net = egress_net
    r, p = probe(net, tmp_path, [
        ["resolve", "resolve", "allowed.test"],
        ["http", "http", net.a2],
        ["http6", "http", net.a2_6],
        ["dns", "dns", net.a2, "allowed.test"],
        ["host", "connect", net.host_addr, net.host_listener.sock.getsockname()[1]],
        ["interfaces", "interfaces"],
    ], "--network", "off")
    assert r.rc == 0, r
    assert p["resolve"].startswith("gaierror:"), r
    assert p["http"] == "ENETUNREACH", r
    assert p["http6"] == "ENETUNREACH", r
    assert p["dns"] == "ENETUNREACH", r
    assert p["host"] == "ENETUNREACH", r
    assert p["interfaces"] == ["lo"], r
    c = net.counts()
    assert c["dns"] == [] and c["http"] == http_counts(net), c
    assert net.host_listener.accepted == 0


# ---- internet ----

def test_internet(egress_net, loopback_server, tmp_path):
    """Any address the configuration opens, by address or by name, IPv4 or
    IPv6; never the host's own addresses (the veth's host end, its loopback,
    also through an IPv4-mapped IPv6 address) nor the cloud metadata address,
    nor reserved ranges."""
    net = egress_net
    hport = net.host_listener.sock.getsockname()[1]
    hport6 = net.host_listener6.sock.getsockname()[1]
    r, p = probe(net, tmp_path, [
        ["by_ip", "http", net.a2],
        ["by_ip6", "http", net.a2_6],
        ["host6", "connect", net.host_addr6, hport6],
        ["metadata_mapped", "connect", "::ffff:169.254.169.254", 80],
        ["reserved6", "connect", "2001:db8::1", 80],
        ["resolve", "resolve", "allowed.test"],
        ["by_name", "http", "allowed.test"],
        ["host", "connect", net.host_addr, hport],
        ["host_mapped", "connect", "::ffff:" + net.host_addr, hport],
        ["loopback", "connect", "127.0.0.1", loopback_server.port],
        ["metadata", "http", "169.254.169.254"],
        ["interfaces", "interfaces"],
    ], "--network", "internet")
    assert r.rc == 0, r
    assert p["by_ip"] == body(net, net.a2, net.a2), r
    assert p["by_ip6"] == body(net, net.a2_6, net.a2_6), r
    assert p["host6"] == REFUSED, r
    assert p["metadata_mapped"] == REFUSED, r
    assert p["reserved6"] == REFUSED, r
    assert p["resolve"] == [net.a2], r
    assert p["by_name"] == body(net, net.a2, "allowed.test"), r
    assert p["host"] == REFUSED, r
    assert p["host_mapped"] == REFUSED, r
    assert p["loopback"] == REFUSED, r          # the sandbox's own loopback
    assert p["metadata"] == REFUSED, r
    assert "eg0" in p["interfaces"], r
    assert net.host_listener.accepted == 0 and net.host_listener6.accepted == 0
    assert loopback_server.accepted == 0
    assert "allowed.test" in net.dns_names()
    assert net.counts()["http"] == http_counts(net, {net.a2: 2, net.a2_6: 1})
    assert_logged(r, p, f"{net.host_addr}:{hport}")
    assert_logged(r, p, "169.254.169.254:80")
    assert_logged(r, p, f"[{net.host_addr6}]:{hport6}")
    assert_logged(r, p, "[2001:db8::1]:80")


def test_internet_private_closed(egress_net, tmp_path):
    """Without allow_private, a private range is closed in internet mode, by
    address and by name (its address is dropped from the answer)."""
    net = egress_net
    r, p = probe(net, tmp_path, [
        ["by_ip", "http", net.a2],
        ["by_ip6", "http", net.a2_6],
        ["resolve", "resolve", "allowed.test"],
    ], "--network", "internet", allow_private=False)
    assert r.rc == 0, r
    assert p["by_ip"] == REFUSED, r
    assert p["by_ip6"] == REFUSED, r
    assert p["resolve"] == [] or p["resolve"].startswith("gaierror:"), r
    assert net.counts()["http"] == http_counts(net)
    assert_logged(r, p, f"{net.a2}:80")
    assert_logged(r, p, f"[{net.a2_6}]:80")


def test_mode_ceiling(egress_net, tmp_path):
    """A mode the configuration does not allow is refused before any sandbox
    runs."""
    net = egress_net
    r, p = probe(net, tmp_path, [["by_ip", "http", net.a2]], "--network", "internet",
                 modes=("off", "policy"))
    assert r.rc != 0, r
    assert "PROBE " not in r.out, r
    assert net.counts()["http"] == http_counts(net)


# ---- policy ----

def test_policy_name(egress_net, tmp_path):
    """--allow NAME: that name resolves and its address is reachable; other
    names get NXDOMAIN (and never reach the upstream), other addresses are
    refused, an address rule naming the host's own address opens nothing."""
    net = egress_net
    r, p = probe(net, tmp_path, [
        ["resolve", "resolve", "allowed.test"],
        ["by_name", "http", "allowed.test"],
        ["denied", "resolve", "denied.test"],
        ["denied_dot", "resolve", "DENIED.test."],
        ["sub", "resolve", "sub.allowed.test"],
        ["by_ip3", "http", net.a3],
        # the address allowed.test resolved to, asked for other names: refused
        # before the proxy connects (HTTP Host, TLS server name)
        ["shared_host", "http", "allowed.test", 80, "denied.test"],
        ["shared_sni", "tls", "allowed.test", "sub.allowed.test"],
        # by address, with no name in the request: the address is reachable
        # only through a name, and none is asked for
        ["by_ip2", "http", net.a2],
    ], "--network", "policy", "--allow", "allowed.test")
    assert r.rc == 0, r
    assert p["resolve"] == [net.a2], r
    assert p["by_name"] == body(net, net.a2, "allowed.test"), r
    assert p["shared_host"] == "ECONNRESET", r
    assert p["shared_sni"] == "ECONNRESET", r
    assert p["by_ip2"] == "ECONNRESET", r
    hosts = net.counts()["hosts"]
    assert not {"denied.test", "sub.allowed.test"} & set(hosts), hosts
    assert_logged(r, p, "denied.test, which the policy does not allow")
    assert_logged(r, p, "sub.allowed.test, which the policy does not allow")
    assert_logged(r, p, "no name was read: an HTTP request for an address")
    assert p["denied"] == "gaierror:EAI_NONAME", r
    assert p["denied_dot"] == "gaierror:EAI_NONAME", r
    assert p["sub"] == "gaierror:EAI_NONAME", r
    assert p["by_ip3"] == REFUSED, r
    names = net.dns_names()
    assert "allowed.test" in names
    assert not names & {"denied.test", "sub.allowed.test"}, names
    # the proxy never connected for the three refused requests
    assert net.counts()["http"] == http_counts(net, {net.a2: 1})
    assert_logged(r, p, f"{net.a3}:80")
    assert_logged(r, p, "denied.test")


def test_policy_name_fails_closed(egress_net, tmp_path):
    """An address reachable only because an allowed name resolved to it takes
    only connections whose first bytes name an allowed name: a ClientHello
    is read across TLS records (split in two, or in records of 2^14 bytes),
    and a connection that names nothing readable (no server name, an h2c
    preface, no Host) or nothing at all within the proxy's 5 s is reset
    without the proxy ever connecting, and logged with its reason."""
    net = egress_net
    r, p = probe(net, tmp_path, [
        ["resolve", "resolve", "allowed.test"],
        ["split_denied", "hello", "allowed.test", "denied.test", 60],
        ["split_allowed", "hello", "allowed.test", "allowed.test", 60],
        ["big_allowed", "hello", "allowed.test", "allowed.test", 16384, 20000],
        ["no_sni", "hello", "allowed.test", None, 16384],
        ["h2c", "send", "allowed.test", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"],
        ["no_host", "send", "allowed.test", "GET / HTTP/1.0\r\n\r\n"],
        ["silent", "silent", "allowed.test"],
    ], "--network", "policy", "--allow", "allowed.test")
    assert r.rc == 0, r
    assert p["resolve"] == [net.a2], r
    for k in ("split_denied", "no_sni", "h2c", "no_host", "silent"):
        assert p[k] == "ECONNRESET", (k, r)
    # let through: the server (HTTP) answers what it read, naming no Host
    assert p["split_allowed"].startswith("reply:HTTP/1.0 200"), r
    assert body(net, net.a2, "")[len("body:"):] in p["split_allowed"], r
    # (the server stops reading at 8 KiB and may reset the rest)
    assert p["big_allowed"].startswith("reply:HTTP/1.0 200") or \
        p["big_allowed"] == "ECONNRESET", r
    # only the two allowed ClientHellos reached the server
    assert net.counts()["http"] == http_counts(net, {net.a2: 2})
    assert_logged(r, p, "denied.test, which the policy does not allow")
    assert_logged(r, p, "no name was read: no server name in the ClientHello")
    assert_logged(r, p, "no name was read: an HTTP/2 preface")
    assert_logged(r, p, "no name was read: no Host in the HTTP request")
    assert_logged(r, p, "no name was read: none came within 5 s")


def test_translation_prefixes(egress_net, tmp_path):
    """IPv6 addresses that carry an IPv4 address (IPv4-compatible ::/96,
    NAT64 64:ff9b::/96 and 64:ff9b:1::/48) are refused at connect() in any
    mode, whichever address they carry; an IPv4-mapped one is its IPv4
    address. corral runs in the test network's namespace here, so that
    nothing could leave the machine even if they were let through (and so
    that the namespace's addresses are the host's own: the denials logged
    show that corral's rules refused them, not a missing route)."""
    net = egress_net
    mapped_lan = "::" + net.a2   # IPv4-compatible form of a reachable address
    r, p = probe(net, tmp_path, [
        ["compat", "connect", "::7f00:1", 80],
        ["compat_lan", "connect", mapped_lan, 80],
        ["nat64", "connect", "64:ff9b::7f00:1", 80],
        ["nat64_local", "connect", "64:ff9b:1::7f00:1", 80],
        ["mapped", "connect", "::ffff:127.0.0.1", 80],
    ], "--network", "internet", wrap=("nsenter", f"--net=/run/netns/{net.ns}"))
    assert r.rc == 0, r
    for k in ("compat", "compat_lan", "nat64", "nat64_local", "mapped"):
        assert p[k] == REFUSED, (k, r)
    assert net.counts()["http"] == http_counts(net)
    assert_logged(r, p, "[::127.0.0.1]:80")
    assert_logged(r, p, "[64:ff9b::7f00:1]:80")
    assert_logged(r, p, "[64:ff9b:1::7f00:1]:80")
    assert_logged(r, p, f"[::{net.a2}]:80")


def test_operator_host_addresses(egress_net, tmp_path):
    """network.host_addresses: addresses of this host beyond its interfaces'
    (its public address under 1:1 NAT) are closed like the interfaces' own,
    by address and in DNS answers, even in internet mode."""
    net = egress_net
    r, p = probe(net, tmp_path, [
        ["by_ip3", "http", net.a3],
        ["by_ip6", "http", net.a2_6],
        ["resolve3", "resolve", "denied.test"],
        ["by_ip2", "http", net.a2],
    ], "--network", "internet", host_addresses=(net.a3, f"{net.a2_6}/128"))
    assert r.rc == 0, r
    assert p["by_ip3"] == REFUSED, r
    assert p["by_ip6"] == REFUSED, r
    assert p["resolve3"] == [] or p["resolve3"].startswith("gaierror:"), r
    assert p["by_ip2"] == body(net, net.a2, net.a2), r
    assert net.counts()["http"] == http_counts(net, {net.a2: 1})
    assert_logged(r, p, f"{net.a3}:80 (an address of this host)")
    assert_logged(r, p, f"[{net.a2_6}]:80 (an address of this host)")


def test_policy_cidr(egress_net, tmp_path):
    """An address rule (a /32) opens that address; the host's own address
    stays closed even when a rule names it."""
    net = egress_net
    hport = net.host_listener.sock.getsockname()[1]
    r, p = probe(net, tmp_path, [
        ["by_ip3", "http", net.a3],
        ["by_ip2", "http", net.a2],
        ["host", "connect", net.host_addr, hport],
    ], "--network", "policy", "--allow", f"{net.a3}/32", "--allow", f"{net.host_addr}/32")
    assert r.rc == 0, r
    assert p["by_ip3"] == body(net, net.a3, net.a3), r
    assert p["by_ip2"] == REFUSED, r
    assert p["host"] == REFUSED, r
    assert net.host_listener.accepted == 0
    assert net.counts()["http"] == http_counts(net, {net.a3: 1})
    assert_logged(r, p, f"{net.a2}:80")
    assert_logged(r, p, f"{net.host_addr}:{hport}")


def test_policy_wildcard_first_match(egress_net, tmp_path):
    """*.NAME matches the names below NAME, not NAME; rules are tried in
    command-line order and the first match decides."""
    net = egress_net
    steps = [["sub", "resolve", "sub.allowed.test"],
             ["other", "resolve", "other.allowed.test"],
             ["apex", "resolve", "allowed.test"]]
    r, p = probe(net, tmp_path, steps, "--network", "policy",
                 "--deny", "sub.allowed.test", "--allow", "*.allowed.test")
    assert r.rc == 0, r
    assert p["sub"] == "gaierror:EAI_NONAME", r
    assert p["other"] == [net.a2], r
    assert p["apex"] == "gaierror:EAI_NONAME", r

    r, p = probe(net, tmp_path, steps, "--network", "policy",
                 "--allow", "*.allowed.test", "--deny", "sub.allowed.test")
    assert r.rc == 0, r
    assert p["sub"] == [net.a2], r
    assert p["other"] == [net.a2], r
    assert p["apex"] == "gaierror:EAI_NONAME", r


def test_policy_default_allow(egress_net, tmp_path):
    """--network-default allow: what no rule denies resolves."""
    net = egress_net
    r, p = probe(net, tmp_path, [
        ["denied", "resolve", "denied.test"],
        ["by_name", "http", "allowed.test"],
    ], "--network", "policy", "--deny", "denied.test", "--network-default", "allow")
    assert r.rc == 0, r
    assert p["denied"] == "gaierror:EAI_NONAME", r
    assert p["by_name"] == body(net, net.a2, "allowed.test"), r
    assert "denied.test" not in net.dns_names()


# ---- DNS tricks ----

def test_dns_rebinding_and_other_resolvers(egress_net, tmp_path):
    """Forbidden addresses are dropped from answers (a name allowed to
    resolve to the host's loopback, its own address or the metadata service
    gives none of them), and opening a name opens only the addresses that
    remain. Queries to any other resolver, over UDP or TCP, are the stub's:
    they reach only the configured upstream, under the same policy, and so
    do queries to the upstream itself. An answer the upstream truncates
    over UDP is asked again over TCP, and its addresses are opened."""
    net = egress_net
    hport = net.host_listener.sock.getsockname()[1]
    other = net.a3   # no DNS server there: only the stub can answer
    r, p = probe(net, tmp_path, [
        ["rebind", "resolve", "rebind.test"],
        ["rebind_dns", "dns", other, "rebind.test"],
        ["host", "connect", net.host_addr, hport],
        ["metadata", "http", "169.254.169.254"],
        ["mixed", "resolve", "mixed.test"],
        ["other_ok", "dns", other, "allowed.test"],
        ["other_ok_tcp", "dns", other, "allowed.test", True],
        ["other_denied", "dns", other, "denied.test"],
        ["other_denied_case", "dns", other, "DeNiEd.TeSt"],
        ["other_denied_tcp", "dns", other, "denied.test", True],
        ["far_denied", "dns", "10.233.255.254", "denied.test"],
        ["upstream_denied", "dns", net.a2, "denied.test"],
        ["upstream_denied_tcp", "dns", net.a2, "denied.test", True],
        ["big", "resolve", "big.test"],
        ["big_http", "http", net.a2, 80, "big.test"],
    ], "--network", "policy", "--allow", "rebind.test", "--allow", "mixed.test",
        "--allow", "allowed.test", "--allow", "big.test")
    assert r.rc == 0, r
    assert p["rebind"] == [] or p["rebind"].startswith("gaierror:"), r
    assert isinstance(p["rebind_dns"], dict) and p["rebind_dns"]["a"] == [], r
    assert p["host"] == REFUSED, r
    assert p["metadata"] == REFUSED, r
    assert p["mixed"] == [net.a2], r
    assert p["other_ok"] == {"rcode": 0, "a": [net.a2]}, r
    assert p["other_ok_tcp"] == {"rcode": 0, "a": [net.a2]}, r
    for k in ("other_denied", "other_denied_case", "other_denied_tcp", "far_denied",
              "upstream_denied", "upstream_denied_tcp"):
        assert p[k] == {"rcode": 3, "a": []}, (k, r)     # NXDOMAIN
    # all 40: the stub's UDP answer holds what fits in 512 bytes and says it
    # was cut (TC), and the resolver asks again over TCP
    assert isinstance(p["big"], list) and net.a2 in p["big"] and len(p["big"]) == 40, r
    assert p["big_http"] == body(net, net.a2, "big.test"), r
    assert "big.test" in net.counts()["dns_tcp"]
    assert net.host_listener.accepted == 0
    names = net.dns_names()
    assert {"rebind.test", "mixed.test", "allowed.test"} <= names, names
    assert "denied.test" not in names, names
    assert_logged(r, p, f"{net.host_addr}:{hport}")
    assert_logged(r, p, "denied.test")


# ---- not TCP ----

def test_udp_icmp_raw(egress_net, tmp_path):
    """Only TCP and DNS leave: a datagram elsewhere is refused at once,
    ICMP and raw sockets go nowhere."""
    net = egress_net
    r, p = probe(net, tmp_path, [
        ["udp", "udp", net.a2, net.UDP_PORT],
        ["udp_sendto", "udp_sendto", net.a2, net.UDP_PORT],
        ["ping", "ping", net.a2],
        ["raw4", "raw4"],
        ["raw6", "raw6"],
        ["packet", "packet"],
        ["by_ip", "http", net.a2],
    ], "--network", "internet")
    assert r.rc == 0, r
    assert p["udp"] in ("EPERM", REFUSED), r
    assert p["udp_sendto"] in ("EPERM", REFUSED), r
    assert p["ping"] in ("EACCES", "EPERM", REFUSED), r
    assert p["raw4"] == "EPERM", r
    assert p["raw6"] == "EPERM", r
    assert p["packet"] in ("EPERM", "EAFNOSUPPORT"), r
    assert p["by_ip"] == body(net, net.a2, net.a2), r   # the network is up
    c = net.counts()
    assert c["udp"] == 0 and c["icmp_echos"] == 0, c


# ---- the host's loopback, whatever the mode ----

@pytest.mark.parametrize("mode", [(), ("--network", "internet"),
                                  ("--network", "policy", "--allow", "*",
                                   "--network-default", "allow")],
                         ids=["default-off", "internet", "policy-allow-all"])
def test_host_loopback(egress_net, loopback_server, tmp_path, mode):
    net = egress_net
    port = loopback_server.port
    r, p = probe(net, tmp_path, [
        ["v4", "connect", "127.0.0.1", port],
        ["v4_other", "connect", "127.0.0.2", port],
        ["mapped", "connect", "::ffff:127.0.0.1", port],
        ["v6", "connect", "::1", port],
        ["localhost", "http", "localhost", port],
    ], *mode)
    assert r.rc == 0, r
    for k in ("v4", "v4_other", "mapped", "v6", "localhost"):
        assert p[k] in (REFUSED, "EADDRNOTAVAIL", "ENETUNREACH"), (k, r)
    assert p["v4"] == REFUSED, r
    assert loopback_server.accepted == 0
