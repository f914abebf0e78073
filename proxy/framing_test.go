package proxy

import "testing"

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
