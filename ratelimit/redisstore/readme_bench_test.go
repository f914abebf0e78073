package redisstore

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestREADMERedisBenchmarkCommand keeps README's redis-benchmark line the
// one TestThroughputAgainstRedisBenchmark runs (with PORT, C, SHA, HASH and
// TAIL for what changes between runs), and checks that its EVALSHA, with
// those filled in, is a decision the script accepts: a line written for an
// older script's arguments fails in Redis with a Lua error.
func TestREADMERedisBenchmarkCommand(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?m)^redis-benchmark -h (?:.*\\\\\n)*.*$").Find(readme)
	if block == nil {
		t.Fatal("README.md shows no redis-benchmark command")
	}
	shown := shellWords(t, strings.ReplaceAll(string(block), "\\\n", " "))

	srv := redistest.Start(t)
	s := newStore(t, Options{Addresses: []string{srv.Addr()}, Timeout: time.Second})
	reqs := []ratelimit.Request{{Policy: benchPolicy(t), Key: "k"}}
	keys, args := s.call(time.Now(), reqs, modeTake, "bench.1", "", nil, nil, nil)
	hash := keys[0][strings.LastIndexByte(keys[0], ':')+1:]
	tail := args[3]

	placeheld := slices.Clone(args)
	placeheld[3] = "TAIL"
	want := append([]string{"redis-benchmark"}, benchmarkCommand("PORT", "C", "200000", "SHA",
		[]string{strings.TrimSuffix(keys[0], hash) + "HASH"}, placeheld)...)
	if !slices.Equal(shown, want) {
		t.Fatalf("README.md's redis-benchmark command is not the one the throughput test runs:\ngot  %q\nwant %q", shown, want)
	}

	sha := srv.Do("SCRIPT", "LOAD", commonSource+decideSource)
	evalsha := slices.Index(shown, "EVALSHA")
	call := slices.Clone(shown[evalsha:])
	for i, w := range call {
		w = strings.ReplaceAll(w, "HASH", hash)
		switch w {
		case "SHA":
			w = sha
		case "TAIL":
			w = tail
		}
		call[i] = w
	}
	if _, err := redistest.Command(srv.Addr(), call...); err != nil {
		t.Fatalf("README.md's EVALSHA, run: %v", err)
	}
}

// shellWords splits line as a POSIX shell splits a line of plain words
// and single-quoted strings, which is all README's command holds.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, r := range line {
		switch {
		case quoted && r == '\'':
			quoted = false
		case quoted:
			w.WriteRune(r)
		case r == '\'':
			quoted, inWord = true, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unclosed quote in %q", line)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}
