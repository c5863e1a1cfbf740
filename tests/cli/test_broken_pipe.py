"""A reader that goes away (``pegasus ... | head -1``) ends pegasus quietly: no 'internal error', no traceback."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import DEMO_DIR


def test_closed_stdout_is_not_an_internal_error(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "pegasus", "import", "onnx", "--model",
                             str(DEMO_DIR / "lenet_mnist.onnx"), "--output-model", str(tmp_path / "m.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert "internal error" not in stderr and "Traceback" not in stderr, stderr
    assert code in (0, 141)
