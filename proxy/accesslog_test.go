package proxy

import (
	"bytes"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

// TestAccessLineMatchesSlog holds the hand-encoded access line to what the
// slog JSON handler writes for the same request, byte for byte.
func TestAccessLineMatchesSlog(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 12, 0, 0, 123456789, time.FixedZone("X", 5400))
	odd := "q\"uote\\ <&> tab\t nl\n ctl\x01 bad\xff sep\u2028 ✓"
	for _, tc := range []struct {
		name string
		ex   exchange
		l    accessLine
		path string
	}{
		{"plain", exchange{id: "abc", client: netip.MustParseAddr("127.0.0.1"), upstream: "127.0.0.1:9000"},
			accessLine{at: at, route: "api", status: 200, duration: 1234567 * time.Nanosecond}, "/v1/x"},
		{"rejected", exchange{id: "id", client: netip.MustParseAddr("2001:db8::1"), rejectedBy: "otp#1", keys: []string{"k1", odd}},
			accessLine{at: at, route: "otp", status: 429, duration: 40 * time.Microsecond}, "/v1/otp"},
		{"everything", exchange{id: odd, client: netip.MustParseAddr("192.0.2.1"), upstream: "u:1", waited: 1500 * time.Millisecond, upstreamErr: errors.New(odd), bodyErr: errors.New("body " + odd), keys: []string{}},
			accessLine{at: at.Add(-123 * time.Millisecond), route: odd, status: 502, duration: 3 * time.Second}, "/" + odd},
		// The escaper skips plain bytes eight at a time: odd bytes
		// after whole blocks of plain ones.
		{"long", exchange{id: "0123456789abcdef0123456789abcdef", client: netip.MustParseAddr("127.0.0.1"), rejectedBy: "a-long-policy-name\x01", keys: []string{"01234567" + odd, "0123456789abcdef\xff", "01234567\u2028"}},
			accessLine{at: at, route: "a-route-named-at-length\"", status: 429}, "/a/path/of/some/length/" + odd},
		{"zero", exchange{}, accessLine{at: time.Unix(0, 0).UTC(), status: 499}, "/"},
		// netip takes any bytes as a zone; the line stays JSON.
		{"zoned client", exchange{id: "z", client: netip.MustParseAddr(`fe80::1%x","route":"forged`)},
			accessLine{at: at, route: "api", status: 200}, "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", "/", nil)
			r.URL.Path = tc.path
			var viaSlog, direct bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&viaSlog, nil))
			(&Gateway{log: log}).logAccess(r, &tc.ex, tc.l)
			(&Gateway{log: log, access: &direct}).logAccess(r, &tc.ex, tc.l)
			if viaSlog.String() != direct.String() {
				t.Errorf("got  %s\nwant %s", direct.String(), viaSlog.String())
			}
		})
	}
}

func TestAccessLineFollowsLogLevel(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r := httptest.NewRequest("GET", "/", nil)
	(&Gateway{log: log, access: &out}).logAccess(r, &exchange{}, accessLine{status: 200})
	if out.Len() != 0 {
		t.Errorf("at level warn: got %q, want no access line", out.String())
	}
}

// TestAppendTimeMatchesAppendFormat holds the access line's time to what
// AppendFormat writes for RFC 3339 with nanoseconds (as slog does).
func TestAppendTimeMatchesAppendFormat(t *testing.T) {
	t.Parallel()
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("A", 5400), time.FixedZone("B", -3*3600-1),
		time.FixedZone("C", 59), time.FixedZone("D", -59), time.FixedZone("E", 99*3600+59*60), time.FixedZone("F", -100*3600)}
	if ny, err := time.LoadLocation("America/New_York"); err == nil {
		zones = append(zones, ny)
	}
	times := []time.Time{time.Unix(0, 0), time.Unix(0, 1), time.Unix(1, 100), time.Unix(-1, 999999999),
		time.Date(2026, 3, 8, 6, 59, 59, 120000000, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 12, 31, 23, 0, 0, 5, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Now()}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		times = append(times, time.Unix(rnd.Int64N(400*365*86400)-100*365*86400, rnd.Int64N(1e9)))
		times = append(times, time.Unix(rnd.Int64N(2e9), rnd.Int64N(1000)*1e6))
	}
	for _, at := range times {
		for _, z := range zones {
			at := at.In(z)
			want := at.AppendFormat(nil, time.RFC3339Nano)
			if got := appendTime(nil, at); !bytes.Equal(got, want) {
				t.Fatalf("appendTime(%v): got %s, want %s", at, got, want)
			}
		}
	}
}

// TestAppendMillisMatchesStrconv holds the access line's durations to
// strconv's shortest 'f' form of float64(d.Microseconds())/1000, which
// is what slog writes for them (TestAccessLineMatchesSlog).
func TestAppendMillisMatchesStrconv(t *testing.T) {
	t.Parallel()
	ds := []time.Duration{0, 1, 999, time.Microsecond, 10 * time.Microsecond, 40 * time.Microsecond, 999 * time.Microsecond,
		time.Millisecond, 1001 * time.Microsecond, 1010 * time.Microsecond, 1100 * time.Microsecond, 1234567 * time.Nanosecond,
		time.Second, 3 * time.Second, 90 * time.Minute, (1<<33 - 1) * time.Microsecond, (1 << 33) * time.Microsecond,
		1 << 62, -time.Microsecond, -1500 * time.Microsecond, -(1 << 62)}
	rnd := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		ds = append(ds, time.Duration(rnd.Int64N(1<<34))*time.Microsecond+time.Duration(rnd.Int64N(1000)))
		ds = append(ds, time.Duration(rnd.Int64N(1e7))*time.Microsecond)
	}
	for _, d := range ds {
		want := strconv.AppendFloat(nil, float64(d.Microseconds())/1000, 'f', -1, 64)
		if got := appendMillis(nil, d); !bytes.Equal(got, want) {
			t.Fatalf("appendMillis(%d): got %s, want %s", d, got, want)
		}
	}
}
