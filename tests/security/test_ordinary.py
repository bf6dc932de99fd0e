"""What the isolation must not break, and layer combinations corral refuses."""

import pytest

from helpers import disable, run

DATA_SCIENCE = r'''
import numpy as np
import pandas as pd
import matplotlib
import matplotlib.pyplot as plt

a = np.array([[4.0, 1.0], [2.0, 3.0]])
x = np.linalg.solve(a, np.array([1.0, 2.0]))
eig = sorted(np.linalg.eigvals(a).real.round(6).tolist())
m = np.random.default_rng(0).random((200, 200)) + 200 * np.eye(200)
inv_ok = bool(np.allclose(np.linalg.inv(m) @ m, np.eye(200)))

df = pd.DataFrame({"city": ["a", "b", "a", "c", "b", "a"], "v": [1, 2, 3, 4, 5, 6]})
means = df.groupby("city")["v"].mean().to_dict()
df.to_csv("/tmp/data.csv", index=False)
back = pd.read_csv("/tmp/data.csv")

fig, ax = plt.subplots()
ax.plot(np.arange(10), np.arange(10) ** 2, label="squares")
ax.set_title("probe")
ax.legend()
fig.savefig("/tmp/plot.png")
with open("/tmp/plot.png", "rb") as f:
    png = f.read(8)
emit(solve=x.round(6).tolist(), eig=eig, inv_ok=inv_ok, means=means, rows=len(back),
     png=png == b"\x89PNG\r\n\x1a\n", size=os.path.getsize("/tmp/plot.png"),
     backend=matplotlib.get_backend())
'''


def test_numpy_pandas_matplotlib():
    r = run(DATA_SCIENCE, timeout=120)
    assert r.rc == 0, r
    p = r.probe
    assert p["solve"] == [0.1, 0.6], r
    assert p["eig"] == [2.0, 5.0] and p["inv_ok"], r
    assert p["means"] == {"a": 10 / 3, "b": 3.5, "c": 4.0}, r
    assert p["rows"] == 6 and p["png"] and p["size"] > 1000, r
    assert p["backend"].lower() == "agg", r


@pytest.mark.parametrize("layers", [("nnp",), ("nnp", "userns"), ("nnp", "cgroup")])
def test_seccomp_without_nnp_is_refused(layers):
    """Dropping privileges, the filter can only be installed under
    no_new_privs: corral refuses rather than run without it."""
    r = run("emit(ran=True)", *disable(*layers))
    assert r.rc in (2, 3), r
    assert "PROBE" not in r.out, r
    assert "no_new_privs" in r.err, r
    # With the filter off too, or as real root, the combination is accepted.
    for ok in (layers + ("seccomp",), layers + ("user",)):
        r = run("emit(ran=True)", *disable(*ok))
        assert r.rc == 0 and r.probe == {"ran": True}, (ok, r)
