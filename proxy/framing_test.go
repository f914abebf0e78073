package proxy

import (
	"net/http"
	"testing"
)

func TestHeadScan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, head   string
		doubt, whole bool
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, true},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, true},
		{"both", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", true, true},
		{"both, bare LF", "HTTP/1.1 200 OK\nTRANSFER-ENCODING: chunked\nCONTENT-LENGTH: 2\n\n", true, true},
		{"both, space before the colon", "HTTP/1.1 200 OK\r\nContent-Length : 2\r\nTransfer-Encoding: chunked\r\n\r\n", true, true},
		{"HTTP/1.0 transfer-encoding", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", true, true},
		{"HTTP/1.0 content-length", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n", false, true},
		{"a body that looks like fields", "HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\nTransfer-Encoding: chunked\r\n\r\n", false, true},
		{"a folded line", "HTTP/1.1 200 OK\r\nX-A: a\r\n Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", false, true},
		{"field names alike", "HTTP/1.1 200 OK\r\nX-Content-Length: 2\r\nTransfer-Encodings: chunked\r\n\r\n", false, true},
		{"204", "HTTP/1.1 204 No Content\r\n\r\n", false, true},
		{"204, length 0", "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", false, true},
		{"204 with a length", "HTTP/1.1 204 No Content\r\nContent-Length: 40\r\n\r\n", true, true},
		{"204 with no reason, chunked", "HTTP/1.1 204\r\nTransfer-Encoding: chunked\r\n\r\n", true, true},
		{"2040 is no 204", "HTTP/1.1 2040 X\r\nContent-Length: 40\r\n\r\n", false, true},
		{"304 with a length", "HTTP/1.1 304 Not Modified\r\nContent-Length: 40\r\n\r\n", false, true},
		{"cut short", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n", false, false},
		{"status line only", "HTTP/1.1 200 OK", false, false},
	} {
		var s headScan
		doubt, whole := s.scan([]byte(tc.head))
		if doubt != tc.doubt || whole != tc.whole {
			t.Errorf("%s: got doubt %v, whole %v; want %v, %v", tc.name, doubt, whole, tc.doubt, tc.whole)
		}
		// The same head a byte at a time.
		var bs headScan
		for n := range len(tc.head) + 1 {
			doubt, whole = bs.scan([]byte(tc.head[:n]))
			if whole {
				break
			}
		}
		if doubt != tc.doubt || whole != tc.whole {
			t.Errorf("%s, a byte at a time: got doubt %v, whole %v; want %v, %v", tc.name, doubt, whole, tc.doubt, tc.whole)
		}
	}
}

// TestHeadScanConnection: the scan keeps a Connection value only when it
// names a field, and dropHopFields removes those fields only when a
// Connection field says close (http.ReadResponse then drops them all).
func TestHeadScanConnection(t *testing.T) {
	for _, tc := range []struct {
		name, fields string
		kept         int  // values kept
		dropped      bool // X-A removed
	}{
		{"keep-alive", "Connection: keep-alive\r\n", 0, false},
		{"close", "Connection: close\r\n", 0, false},
		{"both", "Connection: Keep-Alive, CLOSE\r\n", 0, false},
		{"a name, no close", "Connection: X-A\r\n", 1, false},
		{"a name and close", "Connection: X-A, close\r\n", 1, true},
		{"apart", "Connection: close\r\nconnection: x-a\r\n", 1, true},
		{"empty elements", "Connection: , ,close,\r\nConnection: ,X-A\r\n", 1, true},
	} {
		var s headScan
		if _, whole := s.scan([]byte("HTTP/1.1 200 OK\r\n" + tc.fields + "X-A: a\r\n\r\n")); !whole {
			t.Fatalf("%s: the head was not whole", tc.name)
		}
		h := http.Header{"X-A": {"a"}, "X-B": {"b"}}
		s.dropHopFields(h)
		if len(s.hop) != tc.kept || (h.Get("X-A") == "") != tc.dropped || h.Get("X-B") != "b" {
			t.Errorf("%s: kept %q, left %v; want %d kept, X-A dropped %v, X-B left", tc.name, s.hop, h, tc.kept, tc.dropped)
		}
	}
	head := []byte("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n")
	if n := testing.AllocsPerRun(100, func() {
		var s headScan
		s.scan(head)
	}); n != 0 {
		t.Errorf("scanning a head with Connection: keep-alive: %v allocations, want 0", n)
	}
}
