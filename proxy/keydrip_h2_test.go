package proxy

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestKeyBodyDripHTTP2: over HTTP/2 too, the part of a body json: keys
// read is held to client_header_timeout as a whole, on the stream: a
// stream that drips its JSON a byte per 100ms, each byte well within
// client_body_timeout, gets 408 once the bound is up, reaches no upstream
// and spends no unit of the limit (no decision is counted), and the
// connection's other streams are answered meanwhile.
func TestKeyBodyDripHTTP2(t *testing.T) {
	t.Parallel()
	up := newBodyUpstream(t)
	_, addr, access, m := edgeGateway(t, up.URL, `
client_header_timeout: 500ms
client_body_timeout: 5s
routes:
  - name: otp
    upstream: %[1]s
    limits:
      - {algorithm: fixed_window, limit: 1, window: 1h, key: [json:phone]}
`)
	_, fr := h2Open(t, addr, 10*time.Second)
	header := func(id uint32, path string, end bool, fields ...string) {
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range h2Req("POST", path, fields...) {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true, EndStream: end}); err != nil {
			t.Fatal(err)
		}
	}
	body := `{"phone":"5550100"}`
	header(1, "/otp", false, "content-type", "application/json")
	began := time.Now()
	status := map[uint32]string{}
	var statusAt time.Duration
	dec := hpack.NewDecoder(4096, nil)
	frames, done := make(chan any), make(chan struct{})
	defer close(done)
	send := func(f any) bool {
		select {
		case frames <- f:
			return true
		case <-done:
			return false
		}
	}
	go func() {
		defer close(frames)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if h, ok := f.(*http2.HeadersFrame); ok {
				fs, _ := dec.DecodeFull(h.HeaderBlockFragment())
				for _, hf := range fs {
					if hf.Name == ":status" {
						if !send(&statusFrame{h.StreamID, hf.Value}) {
							return
						}
					}
				}
				continue
			}
			if !send(f) {
				return
			}
		}
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	sent, other := 0, false
	for status[1] == "" {
		select {
		case f, ok := <-frames:
			if !ok {
				t.Fatalf("connection ended; statuses %v", status)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			case *statusFrame:
				status[f.id] = f.status
				if f.id == 1 {
					statusAt = time.Since(began)
				}
			case *http2.RSTStreamFrame:
				status[f.StreamID] = "reset"
			}
		case <-tick.C:
			if time.Since(began) > 5*time.Second {
				t.Fatalf("no answer to the dripping stream after 5s")
			}
			if sent < len(body) {
				fr.WriteData(1, false, []byte(body[sent:sent+1]))
				sent++
			}
			if !other && sent == 2 {
				// Another stream, whole, while the first drips.
				other = true
				header(3, "/other", false, "content-type", "application/json")
				fr.WriteData(3, true, []byte(`{"phone":"5550199"}`))
			}
		}
	}
	if status[1] != "408" {
		t.Errorf("dripping stream: got %s, want 408", status[1])
	}
	if statusAt < 400*time.Millisecond || statusAt > 1500*time.Millisecond {
		t.Errorf("dripping stream answered after %v, want at client_header_timeout (500ms)", statusAt.Round(10*time.Millisecond))
	}
	if status[3] != "200" {
		t.Errorf("the other stream: got %q, want 200 before the drip's 408", status[3])
	}
	statuses := waitStatuses(access, 2)
	got := counterBy(t, m, "sluice_ratelimit_decisions_total", "result")
	if fmt.Sprint(got) != "map[allowed:1]" {
		t.Errorf("decisions: got %v, want the other stream's allowed only", got)
	}
	if up.seen() != 1 {
		t.Errorf("the upstream saw %d requests, want the other stream's only", up.seen())
	}
	if got := statuses; fmt.Sprint(got) != "[200 408]" {
		t.Errorf("access lines' statuses: got %v, want [200 408]", got)
	}
}

// statusFrame is the :status of a stream's answer, as the test's reader
// decoded it.
type statusFrame struct {
	id     uint32
	status string
}
