"""The exporter tests' access to the bundle harness, which lives in the package
(``pegasus.exporters.glow.run.toolchains``) because ``pegasus run`` uses it too."""

import shutil  # noqa: F401  (tests patch toolchains.shutil.which to simulate a missing tool)
import subprocess
from pathlib import Path

from pegasus.exporters.glow.run.toolchains import (  # noqa: F401
    BOARDS,
    HARNESS_DIR,
    BareMetalRun,
    Board,
    ToolchainError,
    board_for,
    build_cortex_m,
    count_instructions_cortex_m,
    object_uses_hard_float,
    parse_semihosting,
    placeholder_macro,
    require_tool,
    run_aarch64,
    run_cortex_m,
    run_cortex_m_detailed,
    run_host,
    write_config,
)


def arm_symbols(obj: Path) -> list[str]:
    """The lines ``arm-none-eabi-nm`` prints for a Cortex-M object (address, kind, name)."""
    listing = subprocess.run(["arm-none-eabi-nm", str(obj)], capture_output=True, text=True, check=True)
    return listing.stdout.splitlines()
