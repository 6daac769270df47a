# tessera: the two commands of the README, and the steps they are made of.
#   make demo   build, write the built-in demo model, serve it (Ctrl-C stops the server)
#   make test   build and run every test (C++ with ctest, Python with pytest)
# Variables: TESSERA_CUDA=AUTO|ON|OFF (AUTO: on when nvcc is found),
#            CUDA_ARCHS="90" for a quick single-architecture build, JOBS=N.

BUILD ?= build
TESSERA_CUDA ?= AUTO
CUDA_ARCHS ?= 75;80;86;89;90
JOBS ?= $(shell nproc)
PYTHON := .venv/bin/python
PORT ?= 23333

.PHONY: deps configure build test demo clean

deps:
	@scripts/install_deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DTESSERA_CUDA=$(TESSERA_CUDA) -DTESSERA_CUDA_ARCHS="$(CUDA_ARCHS)" > $(BUILD).configure.log 2>&1 \
	  || (cat $(BUILD).configure.log; exit 1)

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	TESSERA_BINARY=$(BUILD)/tessera $(PYTHON) -m pytest -q tests/python

demo: build
	@[ -f demo-model/config.json ] || $(BUILD)/tessera demo_model demo-model
	@echo "Serving the built-in demo model (random weights: it speaks nonsense) on port $(PORT); Ctrl-C stops it."
	@echo "From another terminal:"
	@echo "  curl http://127.0.0.1:$(PORT)/v1/chat/completions -H 'Content-Type: application/json' -d '{\"model\": \"demo-model\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"max_tokens\": 32}'"
	@echo
	$(BUILD)/tessera serve api_server demo-model --server-port $(PORT)

clean:
	rm -rf $(BUILD) $(BUILD).configure.log demo-model
