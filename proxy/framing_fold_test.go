package proxy

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
)

// TestHopFieldsFolded: http.ReadResponse (textproto) joins an
// obs-fold continuation line to the field before it; the head scan
// skips it. Minor: the upstream alone controls both fields, so this is
// no injection, but the scan and ReadResponse disagree on what
// Connection names and whether it says close.
func TestHopFieldsFolded(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		wantA      bool // X-A reaches the client
	}{
		// textproto reads one token "X-A X-B": no field X-A is named.
		{"fold after close, X-A", "HTTP/1.1 200 OK\r\nConnection: close, X-A\r\n X-B\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n", true},
		// textproto reads "X-A, close": X-A is named and close said, and
		// ReadResponse drops the Connection field.
		{"close on the fold", "HTTP/1.1 200 OK\r\nConnection: X-A,\r\n close\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n", false},
	} {
		br := bufio.NewReader(strings.NewReader(tc.head))
		var s headScan
		framingInDoubt(br, &s)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s.dropHopFields(resp.Header)
		if got := resp.Header.Get("X-A") != ""; got != tc.wantA {
			t.Errorf("%s: X-A kept %v, want %v (Connection after ReadResponse: %q)", tc.name, got, tc.wantA, resp.Header["Connection"])
		}
	}
}
