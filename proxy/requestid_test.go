package proxy

import (
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRequestIDOnceWhenUpstreamEchoes checks that the response carries one
// X-Request-Id, the one sent upstream, when the upstream echoes it as
// many frameworks do.
func TestRequestIDOnceWhenUpstreamEchoes(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
		w.Header().Add("X-Request-Id", "upstream-own")
	}))
	defer up.Close()
	srv, _ := newTestGateway(t, benchConfig, up.URL)
	for _, tc := range []struct{ name, path, sent string }{
		{"client id, plain route", "/plain", "abc-123"},
		{"client id, limited route", "/limited", "abc-123"},
		{"generated id, plain route", "/plain", ""},
		{"generated id, limited route", "/limited", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", srv.URL+tc.path, nil)
			if tc.sent != "" {
				req.Header.Set("X-Request-Id", tc.sent)
			}
			resp, err := testClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := resp.Header.Values("X-Request-Id")
			if len(got) != 1 || got[0] == "" || got[0] == "upstream-own" || (tc.sent != "" && got[0] != tc.sent) {
				t.Errorf("X-Request-Id: got %q, want exactly one, the id sent upstream (%q when the client sent one)", got, tc.sent)
			}
		})
	}
}

// TestClientRequestIDBounds: a client's X-Request-Id is kept when it is 1
// to 128 visible ASCII characters, and otherwise replaced by a generated
// 32-hex-digit id; the upstream and the client see the same one.
func TestClientRequestIDBounds(t *testing.T) {
	t.Parallel()
	seen := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- strings.Join(r.Header.Values("X-Request-Id"), ",")
	}))
	defer up.Close()
	srv, _ := newTestGateway(t, benchConfig, up.URL)
	long := strings.Repeat("a", 128)
	for _, tc := range []struct {
		name, sent string
		kept       bool
	}{
		{"visible ASCII", `a!"~\{}`, true},
		{"128 characters", long, true},
		{"129 characters", long + "b", false},
		{"a space", "abc def", false},
		{"not ASCII", "caf\u00e9", false},
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/plain", nil)
		req.Header["X-Request-Id"] = []string{tc.sent}
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		resp.Body.Close()
		got, upstream := resp.Header.Get("X-Request-Id"), <-seen
		if got != upstream {
			t.Errorf("%s: client got %q, upstream %q; want the same id", tc.name, got, upstream)
		}
		if tc.kept && got != tc.sent {
			t.Errorf("%s: got %q, want the client's %q kept", tc.name, got, tc.sent)
		}
		if !tc.kept && (len(got) != 32 || strings.Trim(got, "0123456789abcdef") != "") {
			t.Errorf("%s: got %q, want a generated id of 32 hex digits", tc.name, got)
		}
	}
}

// TestRequestIDIsHex holds the request ID to the hex of its random
// bytes as encoding/hex writes them.
func TestRequestIDIsHex(t *testing.T) {
	t.Parallel()
	for _, tc := range [][2]uint64{{0, 0}, {1, 2}, {0x0123456789abcdef, 0xfedcba9876543210}, {^uint64(0), 0x8000000000000001}} {
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:8], tc[0])
		binary.LittleEndian.PutUint64(b[8:], tc[1])
		if got, want := requestID(tc[0], tc[1]), hex.EncodeToString(b[:]); got != want {
			t.Errorf("requestID(%#x, %#x): got %s, want %s", tc[0], tc[1], got, want)
		}
	}
}
