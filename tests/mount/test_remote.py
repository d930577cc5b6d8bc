"""Remotes (issue 41 item 1): `scion remote add|list|remove` keeps the object stores a store
reaches by name in the store (`STORE/remotes`), without credentials: through the mount and on
an unmounted store with --store, across a remount; bad names, URLs, endpoints and regions,
a second remote of one name, and the removal of one that is not there are refused with
clear errors and the documented exit codes; an ordinary user may not change them."""

import json
import os

import pytest

from conftest import PLAIN, copy_scion

pytestmark = pytest.mark.skipif(PLAIN, reason="remotes need a scion store")


def listed(m, *where):
    r = m.run("remote", "list", "--json", *where)
    assert r.returncode == 0, r.describe()
    return [json.loads(x) for x in r.stdout.splitlines()]


def test_remotes_are_kept_in_the_store(scion_mount):
    m = scion_mount
    assert listed(m, "--mount", m.mnt) == []
    r = m.run("remote", "add", "minio", "s3://bases/ci/images/", "--endpoint", "http://127.0.0.1:9000", "--region", "us-east-1", "--mount", m.mnt)
    assert r.returncode == 0, r.describe()
    assert "s3://bases/ci/images at http://127.0.0.1:9000 in us-east-1" in r.stdout
    assert m.run("remote", "add", "aws", "s3://team-data", "--mount", m.mnt).returncode == 0
    want = [
        {"name": "minio", "url": "s3://bases/ci/images", "bucket": "bases", "prefix": "ci/images", "endpoint": "http://127.0.0.1:9000", "region": "us-east-1"},
        {"name": "aws", "url": "s3://team-data", "bucket": "team-data", "prefix": "", "endpoint": "", "region": ""},
    ]
    assert listed(m, "--mount", m.mnt) == want
    table = m.run("remote", "list", "--mount", m.mnt).stdout.splitlines()
    assert table[0].split() == ["NAME", "URL", "REGION", "ENDPOINT"] and table[2].split() == ["aws", "s3://team-data", "-", "-"]
    # Where it lives: the store, and nothing secret in it.
    with open(os.path.join(m.store, "remotes"), "rb") as f:
        kept = f.read()
    assert b"bases" in kept and b"SECRET" not in kept

    # Refusals: exit 2 and what is wrong; nothing changes.
    for args, words in [
        (["add", "minio", "s3://other"], "exists"),
        (["add", "bad name", "s3://abc"], "remote name"),
        (["add", "x", "https://abc"], "s3://BUCKET"),
        (["add", "x", "s3://AB"], "bucket"),
        (["add", "x", "s3://abc", "--endpoint", "ftp://h"], "endpoint"),
        (["add", "x", "s3://abc", "--region", "us east"], "region"),
    ]:
        r = m.run("remote", *args, "--mount", m.mnt)
        assert r.returncode == 2 and words in r.stderr, r.describe()
    r = m.run("remote", "remove", "nowhere", "--mount", m.mnt)
    assert r.returncode == 1 and "no such remote" in r.stderr, r.describe()
    assert listed(m, "--mount", m.mnt) == want

    m.remount()
    assert listed(m, "--mount", m.mnt) == want
    r = m.run("remote", "remove", "minio", "--mount", m.mnt)
    assert r.returncode == 0 and "stays there" in r.stdout, r.describe()
    assert [x["name"] for x in listed(m, "--mount", m.mnt)] == ["aws"]

    # An unmounted store, with --store.
    m.umount()
    assert [x["name"] for x in listed(m, "--store", m.store)] == ["aws"]
    assert m.run("remote", "add", "garage", "s3://g-bucket/p", "--store", m.store).returncode == 0
    assert m.run("remote", "remove", "aws", "--store", m.store).returncode == 0
    m.mount()
    assert [x["name"] for x in listed(m, "--mount", m.mnt)] == ["garage"]
    assert "credentials" in m.run("remote", "--help").stdout or "AWS" in m.run("remote", "--help").stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a user")
def test_an_ordinary_user_may_not_change_remotes(scion_mount):
    from test_selfservice import as_user
    from test_safety import ensure_user

    m = scion_mount
    ensure_user("scion-bob")
    os.chmod(m.root, 0o755)
    exe = copy_scion(m.root)
    assert m.run("remote", "add", "aws", "s3://team-data", "--mount", m.mnt).returncode == 0
    for args in (["add", "mine", "s3://bobs-bucket"], ["remove", "aws"], ["list"]):
        r = as_user("scion-bob", exe, "remote", *args, "--mount", m.mnt)
        assert r.returncode == 2 and "root's and the store owner's" in r.stderr, (args, r.stdout, r.stderr)
    assert [x["name"] for x in listed(m, "--mount", m.mnt)] == ["aws"]
