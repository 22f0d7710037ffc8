# kvindex — build, test, run, bench, lint. `make test` is the README's test command and what CI runs.
GO ?= go
BIN := bin/kvindex
DATA_DIR ?= ./kvindex-data

.PHONY: build test run bench lint fuzz clean status-png

build:
	$(GO) build -o $(BIN) ./cmd/kvindex

test:
	$(GO) vet ./...
	$(GO) test -race -timeout 8m ./...
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null || \
		echo "NOTE: no chromium, chromium-browser or google-chrome on PATH: the status page browser test (server TestStatusPageInBrowser) was skipped (apt-get install chromium)"

run: build
	$(BIN) serve --data-dir $(DATA_DIR)

# The run's table goes to $(BENCH_MD) (bin/, ignored), so a run leaves the tree clean; to refresh
# the committed table: make bench BENCH_MD=docs/BENCHMARKS.md (its section is replaced in place).
BENCH_MD ?= bin/BENCHMARKS.md

bench: build
	$(BIN) bench --trace testdata/conversation_trace.jsonl --scale 8 --markdown $(BENCH_MD)
	@echo "the table: $(BENCH_MD)"

# docs/status-page.png is the screenshot of the browser test (server/status_test.go), which fills
# every section of the page; this refreshes it (needs Chromium: apt-get install chromium).
status-png:
	KVINDEX_REQUIRE_BROWSER=1 KVINDEX_STATUS_PNG=$(CURDIR)/docs/status-page.png \
		$(GO) test ./server -run '^TestStatusPageInBrowser$$' -count=1
	@echo "refreshed: docs/status-page.png"

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

fuzz:
	$(GO) test ./event -run '^$$' -fuzz FuzzDecodeJSON -fuzztime 30s
	$(GO) test ./event -run '^$$' -fuzz FuzzDecodeMsgpack -fuzztime 30s

clean:
	rm -rf bin
