# Two entry points for a fresh machine: `make demo` and `make test`. Each creates .venv and installs
# what it needs first. PYTHON may name another interpreter (3.10+).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
DEMO := conversion_scripts/demo
OUT := out/demo

.PHONY: install demo test check lint clean toolchains fuzz

# pegasus and what the demo needs (the first time: a venv)
$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[demo]"
	touch $(STAMP)

# ... plus the test tools and the frameworks the tests compare against (TensorFlow, TFLite's interpreters,
# torch, OpenCV, Keras 2, Dask), and the .tflite files mediapipe ships (files only: mediapipe's own
# dependencies pin a protobuf older than TensorFlow's, and the tests never import it)
$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e ".[test]"
	$(BIN)/python -m pip install -q --no-deps mediapipe==0.10.21
	touch $(TEST_STAMP)

install: $(TEST_STAMP)

# Import the demo LeNet (ONNX), classify a held-out digit with the float reference, then compile it into a
# Glow bundle for this machine and classify the same digit with the bundle's example program; then quantize
# it (uint8), classify the digit with the integer simulation and with a quantized bundle.
DIGIT := $(DEMO)/images/digit_400_4.png
demo: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH conversion_scripts/0_import_model.sh $(DEMO)/lenet_mnist.onnx $(OUT)
	PATH=$(CURDIR)/$(BIN):$$PATH INPUT_META=$(DEMO)/lenet_mnist_inputmeta.yml \
	  conversion_scripts/inference.sh $(OUT)/lenet_mnist.json $(DIGIT)
	PATH=$(CURDIR)/$(BIN):$$PATH conversion_scripts/2_export_case_code.sh $(OUT)/lenet_mnist.json $(OUT)/bundle
	$(BIN)/python -c "import numpy as np, PIL.Image as I; \
	  np.save('$(OUT)/digit.npy', (np.asarray(I.open('$(DIGIT)'), np.float32) / 255)[None, None])"
	$(MAKE) -s -C $(OUT)/bundle
	$(OUT)/bundle/lenet_mnist_run -n 100 $(OUT)/digit.npy
	PATH=$(CURDIR)/$(BIN):$$PATH INPUT_META=$(DEMO)/lenet_mnist_inputmeta.yml \
	  conversion_scripts/1_quantize_model.sh $(OUT)/lenet_mnist.json
	PATH=$(CURDIR)/$(BIN):$$PATH INPUT_META=$(DEMO)/lenet_mnist_inputmeta.yml DTYPE=quantized \
	  conversion_scripts/inference.sh $(OUT)/lenet_mnist.json $(DIGIT)
	PATH=$(CURDIR)/$(BIN):$$PATH DTYPE=quantized conversion_scripts/2_export_case_code.sh $(OUT)/lenet_mnist.json \
	  $(OUT)/bundle_uint8
	$(MAKE) -s -C $(OUT)/bundle_uint8
	$(OUT)/bundle_uint8/lenet_mnist_run -n 100 $(OUT)/digit.npy

lint: $(TEST_STAMP)
	$(BIN)/ruff check .

# Cross compilers and emulators the bundle tests run on (apt-get, only when one is missing):
# arm-none-eabi-gcc + newlib, qemu-system-arm (mps2 boards), gcc-aarch64-linux-gnu + qemu-aarch64.
toolchains:
	bash scripts/install_toolchains.sh

# Every test; a missing toolchain or framework fails the run (--require-all) instead of skipping its tests.
test: $(TEST_STAMP) lint toolchains
	$(BIN)/python -m pytest -n 2 --dist loadgroup --require-all

# The fast tier, under 2 minutes on 2 cores: ruff, then the tests no tier marker covers (pyproject.toml lists
# the markers, tests/support/tiers.py applies them): no emulator, no compiled bundle, no heavy framework, nothing
# measured slow.
FAST := not slow and not qemu and not bundle and not framework
check: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --dist loadgroup -m "$(FAST)"

# Fuzz every reader of untrusted bytes for FUZZ_SECONDS each (fuzz/: seeded mutation of the corpus in
# fuzz/corpus/; an input that breaks a reader is saved in fuzz/regressions/, which the tests replay).
# Coverage-guided with atheris: .venv/bin/python -m fuzz --target onnx --atheris --seconds 600
FUZZ_SECONDS ?= 300
fuzz: $(TEST_STAMP)
	$(BIN)/python -m fuzz --target all --seconds $(FUZZ_SECONDS) --seed $$(date +%s)

clean:
	rm -rf $(VENV) out
