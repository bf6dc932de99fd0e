"""Probes that try to reach the network: the host's loopback services, and
any address beyond the sandbox (a test host in a network namespace of the
test's own; nothing outside this machine is ever contacted)."""

import socket
import threading

from helpers import disable, run, token

CONNECT = r'''
import socket
def connect(addr, port):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((addr, port))
        return "connected:" + s.recv(100).decode()
    except OSError as e:
        return ename(e.errno) if e.errno else type(e).__name__
    finally:
        s.close()

def routes(path):
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        return ename(e.errno)
    if path.endswith("ipv6_route"):
        return sorted({l.split()[-1] for l in lines if l.strip()})
    return sorted({l.split()[0] for l in lines[1:] if l.strip()})

emit(connect=connect(P["addr"], P["port"]),
     interfaces=sorted(name for _, name in socket.if_nameindex()),
     routes4=routes("/proc/net/route"), routes6=routes("/proc/net/ipv6_route"))
'''


def test_host_loopback_service(loopback_server):
    params = {"addr": "127.0.0.1", "port": loopback_server.port}
    # Contained: the sandbox's loopback is its own: nothing listens there.
    r = run(CONNECT, params=params)
    assert r.rc == 0, r
    assert r.probe["connect"] == "ECONNREFUSED", r
    assert loopback_server.accepted == 0

    # Proof: in the host's network namespace (net) the service answers.
    r = run(CONNECT, *disable("net"), params=params)
    assert r.rc == 0, r
    assert r.probe["connect"] == "connected:" + loopback_server.token, r
    assert loopback_server.accepted == 1


def test_no_network(netns_host):
    params = {"addr": netns_host.addr, "port": netns_host.port}
    # Contained: loopback is the only interface, no route leads anywhere else,
    # and the test host is unreachable.
    r = run(CONNECT, params=params)
    assert r.rc == 0, r
    p = r.probe
    assert p["interfaces"] == ["lo"], r
    assert p["routes4"] == [], r
    assert p["routes6"] in ([], ["lo"]), r
    assert p["connect"] == "ENETUNREACH", r

    # Proof: in the host's network namespace (net) there are other
    # interfaces, and the test host answers through its veth pair.
    r = run(CONNECT, *disable("net"), params=params)
    assert r.rc == 0, r
    assert netns_host.veth_host in r.probe["interfaces"], r
    assert r.probe["connect"] == "connected:" + netns_host.token, r


ABSTRACT = r'''
import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(3)
try:
    s.connect("\0" + P["name"])
    outcome = "connected:" + s.recv(100).decode()
except OSError as e:
    outcome = ename(e.errno)
emit(connect=outcome)
'''


def test_host_abstract_unix_socket():
    """Abstract UNIX sockets have no file to hide: they belong to the network
    namespace."""
    name = f"corral-test-{token()}"
    tok = token()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind("\0" + name)
    srv.listen(4)
    srv.settimeout(5)
    accepted = []

    def serve():
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        accepted.append(1)
        conn.sendall(tok.encode())
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        # Contained: the sandbox's network namespace has its own abstract names.
        r = run(ABSTRACT, params={"name": name})
        assert r.rc == 0, r
        assert r.probe["connect"] == "ECONNREFUSED", r
        assert accepted == []

        # Proof: in the host's network namespace (net) the socket answers.
        r = run(ABSTRACT, *disable("net"), params={"name": name})
        assert r.rc == 0, r
        assert r.probe["connect"] == "connected:" + tok, r
    finally:
        srv.close()
        t.join(5)


FAMILIES = r'''
import socket
def opened(family, kind):
    try:
        socket.socket(family, kind).close()
        return "opened"
    except OSError as e:
        return ename(e.errno)
emit(vsock=opened(socket.AF_VSOCK, socket.SOCK_STREAM),
     packet=opened(socket.AF_PACKET, socket.SOCK_RAW),
     inet=opened(socket.AF_INET, socket.SOCK_STREAM),
     unix=opened(socket.AF_UNIX, socket.SOCK_STREAM),
     netlink=opened(socket.AF_NETLINK, socket.SOCK_RAW))
'''


def test_socket_families():
    """AF_VSOCK is in no network namespace: on a virtual machine it reaches
    the machine's host whatever the sandbox's network. Only AF_UNIX, AF_INET,
    AF_INET6 and AF_NETLINK sockets can be opened; nothing is ever sent."""
    try:
        socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
        host_has_vsock = True
    except OSError:
        host_has_vsock = False
    # Contained: the filter answers as a kernel without the family would.
    r = run(FAMILIES)
    assert r.rc == 0, r
    assert r.probe == {"vsock": "EAFNOSUPPORT", "packet": "EAFNOSUPPORT", "inet": "opened",
                       "unix": "opened", "netlink": "opened"}, r

    # Proof: without the filter (seccomp), and as real root (user) for the
    # packet socket, both open.
    r = run(FAMILIES, *disable("seccomp", "user"))
    assert r.rc == 0, r
    assert r.probe["packet"] == "opened", r
    assert r.probe["vsock"] == ("opened" if host_has_vsock else "EAFNOSUPPORT"), r
