# Parallax engine: build, test and demo targets. Run `make help` for a list.

# A fresh machine may have Go installed in /usr/local/go without it on the PATH.
export PATH := $(PATH):/usr/local/go/bin

GO      ?= go
BIN     := bin
PARALLAX := $(BIN)/parallax
DEMO_IN  := $(BIN)/demo-in.safetensors
DEMO_OUT := $(BIN)/demo-out.safetensors

# Passed through to the tests (from the environment or `make test
# PARALLAX_REQUIRE_VULKAN=1`): 1 makes a missing Vulkan device a test failure
# instead of a skip.
ifdef PARALLAX_REQUIRE_VULKAN
export PARALLAX_REQUIRE_VULKAN
endif

.PHONY: help setup test fmt-check vet build demo fmt clean

help:
	@echo "make setup    install what this machine lacks (Go must be present)"
	@echo "make test     setup, gofmt check, go vet, go test ./..."
	@echo "make build    build $(PARALLAX)"
	@echo "make demo     build, list devices, run Parallax attention on a random example"
	@echo "make vet      go vet ./..."
	@echo "make fmt      gofmt -w the Go sources"
	@echo "make clean    remove $(BIN)/ and test caches"

setup:
	@bash .ci/setup.sh

test: setup fmt-check vet
	$(GO) test ./...

fmt-check:
	@bash .ci/check-gofmt.sh

vet:
	$(GO) vet ./...

fmt:
	@bash .ci/check-gofmt.sh --write

build: setup
	@mkdir -p $(BIN)
	$(GO) build -o $(PARALLAX) ./cmd/parallax

demo: build
	@echo "== parallax devices"
	@$(PARALLAX) devices
	@echo
	@echo "== parallax op attention --example $(DEMO_IN)"
	@$(PARALLAX) op attention --example $(DEMO_IN)
	@echo
	@echo "== parallax op attention --in $(DEMO_IN) --out $(DEMO_OUT)"
	@$(PARALLAX) op attention --in $(DEMO_IN) --out $(DEMO_OUT)

clean:
	rm -rf $(BIN)
	$(GO) clean -testcache
