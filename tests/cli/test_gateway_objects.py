"""Bad input to the gateway's containers, files and virtual-key endpoints
(src/gateway/files_api.c, keys.c) on the wire: each answer is OpenAI's error
shape with the status, type, param and message a client can act on. The
SDK tests (tests/integration/gateway-containers, -tenants) cover what works;
these cover what is refused. Nothing here starts a sandbox."""
import json
import uuid

import pytest

from conftest import NO_POOL, shared, unshared
from test_gateway_serve import MASTER, REQUEST_ID, Gateway, clean_env


@pytest.fixture(scope="module")
def gw():
    # no warm pool: its sandboxes would outlive each test's check of the host
    g = shared(Gateway("--master-key", MASTER, env=clean_env(CORRAL_CONFIG=NO_POOL)))
    yield g
    unshared(g)
    g.stop()


def refused(resp, text, status, param=None, message=None, code=None):
    """The OpenAI error of an answer, checked."""
    assert resp.status == status, text
    assert resp.getheader("Content-Type").startswith("application/json")
    assert REQUEST_ID.match(resp.getheader("x-request-id") or ""), resp.getheaders()
    body = json.loads(text)
    assert list(body) == ["error"] and set(body["error"]) == {"message", "type", "param", "code"}
    err = body["error"]
    assert err["param"] == param, err
    assert err["code"] == code, err
    if message is not None:
        assert err["message"] == message, err
    assert err["message"], err
    return err


def multipart(fields, files):
    """A multipart/form-data body: fields {name: text}, files [(name, filename, bytes)]."""
    boundary = uuid.uuid4().hex
    out = b""
    for name, value in fields.items():
        out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n"
                f"{value}\r\n").encode()
    for name, filename, data in files:
        disp = f"form-data; name=\"{name}\"" + (f"; filename=\"{filename}\"" if filename else "")
        out += (f"--{boundary}\r\nContent-Disposition: {disp}\r\n"
                "Content-Type: application/octet-stream\r\n\r\n").encode() + data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return out, f"multipart/form-data; boundary={boundary}"


def post(gw, path, body=None, raw=None, content_type=None, key=MASTER):
    headers = {"Content-Type": content_type} if content_type else None
    return gw.request("POST", path, body=body, raw=raw, headers=headers, key=key)


# ---- containers ----

@pytest.mark.parametrize("body, param, message", [
    ({}, "name", "Missing required parameter: 'name'."),
    ({"name": 7}, "name", "Missing required parameter: 'name'."),
    ({"name": "x", "memory_limit": "3g"}, "memory_limit", None),
    ({"name": "x", "expires_after": {"anchor": "created_at", "minutes": 5}}, "expires_after",
     None),
    ({"name": "x", "expires_after": {"anchor": "last_active_at", "minutes": 0}},
     "expires_after", None),
    ({"name": "x", "file_ids": "file-1"}, "file_ids",
     "Invalid 'file_ids': expected an array of file ids."),
])
def test_container_create_refuses_bad_fields(gw, body, param, message):
    refused(*post(gw, "/v1/containers", body), 400, param, message)


def test_container_create_refuses_bodies_that_are_not_objects(gw):
    for raw in ("[1]", "\"name\""):
        refused(*post(gw, "/v1/containers", raw=raw), 400, None,
                "The request body must be a JSON object.")
    refused(*post(gw, "/v1/containers", raw="{bad"), 400)


def test_container_create_with_an_unknown_file_id(gw):
    err = refused(*post(gw, "/v1/containers", {"name": "x", "file_ids": ["file-nope"]}), 404,
                  "file_ids")
    assert "file-nope" in err["message"]


@pytest.mark.parametrize("query, param", [
    ("limit=0", "limit"), ("limit=101", "limit"), ("limit=ten", "limit"),
    ("order=up", "order"), ("after=cntr_nope", "after"),
])
def test_lists_refuse_bad_pages(gw, query, param):
    for path in ("/v1/containers", "/v1/files"):
        refused(*gw.request("GET", f"{path}?{query}", key=MASTER), 400, param)


def test_unknown_containers_and_their_files(gw):
    for method, path in (("GET", "/v1/containers/cntr_nope"),
                         ("DELETE", "/v1/containers/cntr_nope"),
                         ("GET", "/v1/containers/cntr_nope/files"),
                         ("GET", "/v1/containers/cntr_nope/files/cfile_1/content")):
        refused(*gw.request(method, path, key=MASTER), 404, None,
                "Container with id 'cntr_nope' not found.")
    resp, text = post(gw, "/v1/containers", {"name": "objects"})
    assert resp.status == 200, text
    cid = json.loads(text)["id"]
    for method, path in (("GET", f"/v1/containers/{cid}/files/cfile_nope"),
                         ("GET", f"/v1/containers/{cid}/files/cfile_nope/content"),
                         ("DELETE", f"/v1/containers/{cid}/files/cfile_nope")):
        refused(*gw.request(method, path, key=MASTER), 404, None,
                "Container file with id 'cfile_nope' not found.")
    refused(*post(gw, f"/v1/containers/{cid}/files", {"file_id": "file-nope"}), 404, "file_id")
    body, ctype = multipart({}, [("file", None, b"no name")])
    refused(*post(gw, f"/v1/containers/{cid}/files", raw=body, content_type=ctype), 400, "file",
            "The uploaded file needs a file name.")
    resp, text = gw.request("DELETE", f"/v1/containers/{cid}", key=MASTER)
    assert resp.status == 200, text


# ---- files ----

def test_file_uploads_need_a_file_and_a_purpose(gw):
    body, ctype = multipart({"purpose": "user_data"}, [])
    refused(*post(gw, "/v1/files", raw=body, content_type=ctype), 400, "file",
            "Missing required parameter: 'file'.")
    body, ctype = multipart({}, [("file", "a.txt", b"hi")])
    refused(*post(gw, "/v1/files", raw=body, content_type=ctype), 400, "purpose",
            "Missing required parameter: 'purpose'.")
    body, ctype = multipart({"purpose": "to-be-eaten"}, [("file", "a.txt", b"hi")])
    refused(*post(gw, "/v1/files", raw=body, content_type=ctype), 400, "purpose")
    # not multipart at all: there is no file
    refused(*post(gw, "/v1/files", {"purpose": "user_data"}), 400, "file",
            "Missing required parameter: 'file'.")


def test_unknown_files(gw):
    for method, path in (("GET", "/v1/files/file-nope"), ("DELETE", "/v1/files/file-nope"),
                         ("GET", "/v1/files/file-nope/content")):
        err = refused(*gw.request(method, path, key=MASTER), 404, "id")
        assert "file-nope" in err["message"]


# ---- virtual keys ----

@pytest.mark.parametrize("body, param", [
    ({"models": "gpt"}, "models"),
    ({"models": ["gpt", 5]}, "models"),
    ({"rpm_limit": 0}, None),
    ({"max_containers": -1}, None),
    ({"max_container_memory": "3g"}, "max_container_memory"),
    ({"key_alias": 5}, None),
    ({"metadata": "x"}, None),
    ({"key": "not-sk"}, "key"),
    ({"key": MASTER}, "key"),
])
def test_key_generate_refuses_bad_fields(gw, body, param):
    refused(*post(gw, "/key/generate", body), 400, param)


@pytest.mark.parametrize("body, param", [
    ({"models": "gpt"}, "models"),
    ({"rpm_limit": 0}, None),
    ({"max_containers": -1}, None),
    ({"max_container_memory": "3g"}, "max_container_memory"),
    ({"metadata": "x"}, None),
])
def test_key_update_refuses_bad_fields(gw, body, param):
    key = "sk-update-" + uuid.uuid4().hex[:16]
    resp, text = post(gw, "/key/generate", {"key": key, "rpm_limit": 5})
    assert resp.status == 200, text
    refused(*post(gw, "/key/update", dict(body, key=key)), 400, param)
    resp, text = gw.request("GET", f"/key/info?key={key}", key=MASTER)
    assert json.loads(text)["info"]["rpm_limit"] == 5, text     # nothing changed


def test_key_update_changes_what_it_is_given(gw):
    key = "sk-update-" + uuid.uuid4().hex[:16]
    resp, text = post(gw, "/key/generate", {"key": key, "key_alias": "before", "rpm_limit": 5,
                                            "models": ["m1"], "metadata": {"team": "a"}})
    assert resp.status == 200, text
    made = json.loads(text)
    resp, text = post(gw, "/key/update", {"key": key, "key_alias": "after", "rpm_limit": None,
                                          "max_containers": 3})
    assert resp.status == 200, text
    info = json.loads(text)["info"]
    assert info["key_alias"] == "after" and info["rpm_limit"] is None
    assert info["max_containers"] == 3
    assert info["models"] == ["m1"] and info["metadata"] == {"team": "a"}   # not given: kept
    assert info["created_at"] == made["created_at"] and info["token"] == made["token"]
    # by its token too, and /key/info shows the same
    resp, text = post(gw, "/key/update", {"key": made["token"], "models": None})
    assert resp.status == 200, text
    resp, text = gw.request("GET", f"/key/info?key={key}", key=MASTER)
    info = json.loads(text)["info"]
    assert info["models"] == [] and info["key_alias"] == "after"


def test_keys_that_exist_and_keys_that_do_not(gw):
    key = "sk-objects-" + uuid.uuid4().hex[:16]
    resp, text = post(gw, "/key/generate", {"key": key})
    assert resp.status == 200, text
    refused(*post(gw, "/key/generate", {"key": key}), 400, "key", "That key exists already.")
    refused(*gw.request("GET", "/key/info", key=MASTER), 400, "key",
            "Missing required parameter: 'key'.")
    refused(*gw.request("GET", "/key/info?key=sk-nope-nope-nope", key=MASTER), 404, "key",
            "Key not found.")
    refused(*post(gw, "/key/update", {"key_alias": "x"}), 400, "key",
            "Missing required parameter: 'key' (the key to update, or its token).")
    refused(*post(gw, "/key/update", {"key": "sk-nope-nope-nope"}), 404, "key", "Key not found.")
    refused(*post(gw, "/key/update", raw="[1]"), 400)
    refused(*post(gw, "/key/delete", {}), 400, "keys")
    refused(*post(gw, "/key/delete", {"keys": ["sk-nope-nope-nope"]}), 404, "keys")
    refused(*post(gw, "/key/delete", raw="[1]"), 400, "keys")
    refused(*gw.request("GET", "/key/nothing", key=MASTER), 404, None,
            "Unknown admin path /key/nothing.")
    # a virtual key is no admin
    resp, text = post(gw, "/key/generate", {}, key=key)
    assert resp.status in (401, 403), text
    resp, text = post(gw, "/key/update", {"key": key, "rpm_limit": 1000}, key=key)
    assert resp.status in (401, 403), text
    resp, text = post(gw, "/key/delete", {"keys": [key]})
    assert resp.status == 200, text
    resp, text = gw.request("GET", "/v1/containers", key=key)
    assert resp.status == 401, text
