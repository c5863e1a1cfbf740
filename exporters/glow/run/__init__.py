"""Running exported bundles on emulated boards (qemu) and the host: the harness behind ``pegasus run``."""
