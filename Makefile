# weir's everyday commands. `make help` lists them.

GO ?= go
STATICCHECK = $(GO) tool -modfile=tools/go.mod staticcheck
PKGS = ./...

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-8s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: demo
demo: ## Run the demo: enqueue and work jobs in an embedded SQLite store (nothing else needed)
	$(GO) run ./cmd/weir demo

.PHONY: example
example: ## Run examples/quickstart against PostgreSQL (WEIR_DATABASE_URL, default: the local server)
	$(GO) run ./examples/quickstart

.PHONY: test
test: ## Vet, then run every test with the race detector against a real PostgreSQL
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

.PHONY: race
race: ## Run every test five times with the race detector, to shake out flakes
	$(GO) test -race -count=5 -timeout 60m $(PKGS)

.PHONY: lint
lint: ## gofmt, go vet and staticcheck (run as a Go tool from tools/go.mod)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(STATICCHECK) $(PKGS)

.PHONY: bench
bench: ## Insert benchmarks (jobs/s); see docs/benchmarks.md
	$(GO) test -run '^$$' -bench 'Insert' -benchtime 3s -count 3 .

.PHONY: bench-drain
bench-drain: ## W1: drain 200,000 no-op jobs with one client, 3 times (jobs/s)
	$(GO) test -run '^$$' -bench 'Drain' -benchtime 1x -count 3 -timeout 30m .

.PHONY: model
model: ## Check the Promela model of the lease protocol with spin (docs/design/model.md)
	model/check.sh

.PHONY: soak
soak: ## The long soak: 10 minutes, every fault, on a throwaway PostgreSQL (docs/design/reliability.md)
	$(GO) run ./cmd/weir soak --start-postgres --faults all --duration 10m --rate 120

.PHONY: soak-long
soak-long: ## The long haul: 30 minutes, every fault, on a throwaway PostgreSQL (docs/design/reliability.md)
	$(GO) run ./cmd/weir soak --start-postgres --faults all --duration 30m --rate 150

BASE ?= HEAD
AB_FLAGS ?= --rounds 3 --workloads drain,latency,bulk

.PHONY: bench-ab
bench-ab: ## weir at BASE (default HEAD) against the working tree, alternated, AB_FLAGS (3 rounds of W1, W3, W4 bulk, about 7 minutes)
	cd bench && $(GO) run ./cmd/compare --ab $(BASE) $(AB_FLAGS)

.PHONY: bench-compare
bench-compare: ## weir and River side by side, 3 rounds of W1-W5 (about 25 minutes; bench/README.md)
	cd bench && $(GO) run ./cmd/compare --rounds 3 --json results/compare.json
