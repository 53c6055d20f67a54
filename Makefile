# Parallax engine: build, test and demo targets. Run `make help` for a list.

# A fresh machine may have Go installed in /usr/local/go without it on the PATH.
export PATH := $(PATH):/usr/local/go/bin

GO      ?= go
BIN     := bin
PARALLAX := $(BIN)/parallax
VIEWER   := $(BIN)/parallax-view
DEMO_IN  := $(BIN)/demo-in.safetensors
DEMO_OUT := $(BIN)/demo-out.safetensors

# Passed through to the tests (from the environment or `make test
# PARALLAX_REQUIRE_VULKAN=1`): 1 makes a missing Vulkan device a test failure
# instead of a skip.
ifdef PARALLAX_REQUIRE_VULKAN
export PARALLAX_REQUIRE_VULKAN
endif

.PHONY: help setup test fmt-check vet spirv-check spirv build build-view view demo fmt clean

help:
	@echo "make setup    install what this machine lacks (Go must be present)"
	@echo "make test     setup, gofmt check, go vet, SPIR-V check, go test ./..."
	@echo "make spirv    recompile the shaders (go generate ./shaders)"
	@echo "make build    build $(PARALLAX)"
	@echo "make view     build $(VIEWER) and open it on the model 'make demo' trained"
	@echo "make demo     build, list devices, run Parallax attention, train the tiny model for a few minutes, sample"
	@echo "make vet      go vet ./..."
	@echo "make fmt      gofmt -w the Go sources"
	@echo "make clean    remove $(BIN)/ and test caches"

setup:
	@bash .ci/setup.sh

# .ci/cache/nvrtc (fetched by setup): NVRTC 12 for the CUDA kernels'
# compile test, which must then compile every module for sm_80 and sm_90a.
NVRTC_DIR := $(CURDIR)/.ci/cache/nvrtc

# .ci/cache/lvp-khr (fetched by setup): Mesa 26's lavapipe, which offers
# VK_KHR_cooperative_matrix, and bin/vk-run to run a program on it; the
# Vulkan tests rerun themselves under it to certify the KHR matmul kernel
# (engine/vulkan/khr_matmul_test.go).
KHR_RUN := $(CURDIR)/.ci/cache/lvp-khr/bin/vk-run

test: setup fmt-check vet spirv-check
	@khr=; if [ -x "$(KHR_RUN)" ]; then khr="PARALLAX_VULKAN_KHR_RUN=$(KHR_RUN)"; fi; \
	if [ -e "$(NVRTC_DIR)/libnvrtc.so.12" ]; then \
		echo "$$khr PARALLAX_CUDA_LIB_DIRS=$(NVRTC_DIR) PARALLAX_REQUIRE_NVRTC=1 $(GO) test -timeout 30m ./..."; \
		env $$khr PARALLAX_CUDA_LIB_DIRS="$(NVRTC_DIR)" PARALLAX_REQUIRE_NVRTC=1 $(GO) test -timeout 30m ./...; \
	else \
		echo "$$khr $(GO) test ./..."; env $$khr $(GO) test ./...; \
	fi

# The committed SPIR-V (shaders/spv) must be what glslc makes of the
# shaders' sources: recompile into a temporary directory and compare. The
# KHR cooperative-matrix variants need the pinned glslc (shaderc 2025.2)
# that setup fetches into .ci/cache/glslc13.
spirv-check:
	$(GO) run ./shaders/gen -dir shaders -check

spirv:
	$(GO) generate ./shaders

fmt-check:
	@bash .ci/check-gofmt.sh

vet:
	$(GO) vet ./...

fmt:
	@bash .ci/check-gofmt.sh --write

build: setup
	@mkdir -p $(BIN)
	$(GO) build -o $(PARALLAX) ./cmd/parallax

# The demo: list the devices, run Parallax attention (forward and backward)
# on a random example, then train the tiny preset on the embedded Austen
# corpus for a few minutes on the best device found and sample from it.
DEMO_RUN    := $(BIN)/demo
DEMO_STEPS  ?= 150
DEMO_PROMPT ?= It is a truth universally acknowledged

demo: build
	@echo "== parallax devices"
	@$(PARALLAX) devices
	@echo
	@echo "== parallax op attention --example $(DEMO_IN)"
	@$(PARALLAX) op attention --example $(DEMO_IN)
	@$(PARALLAX) op attention --in $(DEMO_IN) --out $(DEMO_OUT)
	@echo
	@echo "== parallax train --config tiny --steps $(DEMO_STEPS) --out $(DEMO_RUN)"
	@rm -rf $(DEMO_RUN)
	@$(PARALLAX) train --config tiny --steps $(DEMO_STEPS) --batch 8 --seq 128 --eval-every 50 --out $(DEMO_RUN)
	@echo
	@echo "== parallax generate --model $(DEMO_RUN) --prompt \"$(DEMO_PROMPT)\""
	@$(PARALLAX) generate --model $(DEMO_RUN) --prompt "$(DEMO_PROMPT)" --max-tokens 80 --temperature 0.8 --top-k 40 --seed 1
	@echo
	@echo "Loss curves: $(DEMO_RUN)/curves.png; metrics: $(DEMO_RUN)/metrics.jsonl"
	@echo "Watch it think: make view (a window with its attention maps while it"
	@echo "generates; or $(VIEWER) --model $(DEMO_RUN) after make build-view)"

# The desktop viewer: its own binary, since GLFW's cgo build needs the X11
# headers (make setup installs them) and cmd/parallax must build without.
build-view: setup
	@mkdir -p $(BIN)
	$(GO) build -o $(VIEWER) ./cmd/parallax-view

VIEW_FLAGS ?=
view: build-view
	@test -f $(DEMO_RUN)/model.safetensors || { echo "no model in $(DEMO_RUN): run make demo first"; exit 1; }
	$(VIEWER) --model $(DEMO_RUN) --prompt "$(DEMO_PROMPT)" $(VIEW_FLAGS)

clean:
	rm -rf $(BIN)
	$(GO) clean -testcache
