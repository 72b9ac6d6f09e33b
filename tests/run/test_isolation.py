"""Model code never finds the job's token: `run --comment` with a hostile factory
(tests/fixtures/snooping_models.py) that reads every /proc/*/environ and /proc/*/cmdline it can,
the parent's too, and leaves a detached daemon that keeps looking after the run. The comment is
still posted with the token, to a local fake API (run/isolation.py)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fake_github import FakeGitHub, job_environment
from helpers import FIXTURES, ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")

# Runs a Python command line without any capability, as an ordinary user's processes are (no
# exec or setuid gives one back): here uid 0 stays, so only dumpability stands between two such
# processes, and a root process with every capability is out of their reach anyway (the kernel
# lets no process read one whose capabilities it lacks).
WITHOUT_CAPABILITIES = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(38, 1, 0, 0, 0)
for cap in range(64):
    libc.prctl(24, cap, 0, 0, 0)
libc.capset((ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)())
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


def _python(capabilities: bool, *args: str) -> list[str]:
    return [sys.executable, *args] if capabilities else [
        sys.executable, "-c", WITHOUT_CAPABILITIES, *args]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("capabilities", [True, False], ids=["root", "without-capabilities"])
def test_model_code_never_finds_the_token_during_the_run_or_after(
        tmp_path: Path, capabilities: bool) -> None:
    token = f"ghs_snoop_{secrets.token_hex(16)}"
    decoy = f"ghs_snoop_{secrets.token_hex(8)}"
    out = tmp_path / "seen"
    out.mkdir()
    shutil.copy(FIXTURES / "snooping_models.py", tmp_path / "snooping_models.py")
    spec = tmp_path / "parity.yaml"
    spec.write_text("version: 1\nmodels:\n  - name: snoop\n    torch: snooping_models.py:make\n"
                    "    exporter: torchscript\n    inputs: {x: [batch, 4]}\n")
    fake = FakeGitHub()
    fake.start()
    # A process that does leak a token of the same shape: the looking must find it.
    leak = subprocess.Popen(_python(False, "-c", "import time; time.sleep(120)"),
                            env={"LEAKED": decoy})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_"))}
    env.update(job_environment(fake, tmp_path / "event.json", token),
               SNOOP_OUT=str(out), PYTHONPATH=str(ROOT / "src"))
    try:
        done = subprocess.run(_python(capabilities, "-m", "onnx_parity", "run", str(spec),
                                      "--comment", "--no-annotations", "--json",
                                      str(tmp_path / "report.json")),
                              env=env, cwd=tmp_path, capture_output=True, text=True,
                              check=False, timeout=300)
        time.sleep(0.5)  # a daemon still alive would go on looking meanwhile
        lines = (out / "daemon.log").read_text().splitlines()
    finally:
        leak.kill()
        leak.wait()
        fake.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "created the onnx-parity comment on pull request #7" in done.stderr
    assert len(fake.ours()) == 1 and fake.tokens == {f"Bearer {token}"}

    during = json.loads((out / "during.json").read_text())
    assert during["readable"] > 1 and decoy in during["found"]  # it can look, and it did
    assert token not in during["found"] and during["own_environment"] == []
    assert during["parent_environ"].startswith("refused")  # not dumpable, and no CAP_SYS_PTRACE
    assert during["parent_memory"].startswith("refused")
    assert int(during["capabilities"], 16) == 0

    daemon = json.loads(lines[0])["pid"]
    scans = [json.loads(line) for line in lines[1:]]
    assert scans and all(token not in scan["found"] for scan in scans)
    assert any(decoy in scan["found"] for scan in scans)
    # Nothing the model started outlives the run: the daemon was killed when it ended.
    assert not _alive(daemon), f"the model's daemon {daemon} outlived the run"
    assert token not in done.stdout + done.stderr
