package routes

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// mergeBomb builds a small config whose merge keys name, level after
// level, the previous anchor ten times: 10^levels mappings to merge when
// each is walked anew.
func mergeBomb(levels int) string {
	var b strings.Builder
	b.WriteString("policies:\n  x0: &a0 {algorithm: fixed_window}\n")
	for i := 1; i <= levels; i++ {
		refs := strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", ")
		fmt.Fprintf(&b, "  x%d: &a%d {<<: [%s]}\n", i, i, refs)
	}
	return b.String() + "routes: []\n"
}

// TestMergeKeyBomb: a config of a few hundred bytes whose merge keys name
// one mapping 10^9 times over is refused as any bad config is, not walked
// for a day: each mapping a merge brings in is walked once. (A SIGHUP
// with such a file held the server's lock, and a SIGTERM then waited.)
func TestMergeKeyBomb(t *testing.T) {
	t.Parallel()
	doc := mergeBomb(9)
	done := make(chan error, 1)
	go func() {
		_, err := Parse("sluice.yaml", []byte(doc), noEnv)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("got no error for policies without limit, window or key")
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("a %d-byte config with 9 levels of merge keys was still loading after 30 s", len(doc))
	}
}
