package routes

import (
	"fmt"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

const bruteConfig = `
admin_token: "${TOKEN}"
policies:
  logins:
    algorithm: sliding_window_log
    limit: 5
    window: 15m
    key: [json:username]
    count_status: [401, 403, 5xx]
    block: 1h
  api:
    algorithm: token_bucket
    limit: 100
    window: 1m
    key: [header:X-API-Key, ip]
    overrides:
      - keys: ["${PARTNER}|10.1.2.3"]
        limit: 5000
        burst: 500
      - clients: [10.20.0.0/16, "2001:db8::/32"]
        exempt: true
      - clients: [10.20.30.0/24, 192.0.2.7]
        limit: 7
      - keys: [ordinary|10.20.1.1]
        window: 1h
routes:
  - name: login
    upstream: http://127.0.0.1:9000
    limits: [logins, api]
  - name: shaped
    upstream: http://127.0.0.1:9000
    limits:
      - algorithm: leaky_bucket
        limit: 10
        window: 1s
        queue: 5
        key: [ip]
        overrides:
          - clients: [127.0.0.1]
            queue: 50
            max_wait: 10s
`

func TestBruteForceConfig(t *testing.T) {
	t.Parallel()
	env := func(n string) (string, bool) {
		v, ok := map[string]string{"TOKEN": "s3cret", "PARTNER": "pk-1"}[n]
		return v, ok
	}
	c := mustParse(t, bruteConfig, env)
	if c.AdminToken != "s3cret" {
		t.Errorf("AdminToken: got %q, want the expanded token", c.AdminToken)
	}
	logins := c.Table.Routes[0].Limits[0]
	if logins.Policy.Block != time.Hour {
		t.Errorf("block: got %v, want 1h", logins.Policy.Block)
	}
	for code, want := range map[int]bool{401: true, 403: true, 500: true, 599: true, 200: false, 402: false, 404: false, 429: false, 0: false, 700: false} {
		if got := logins.CountStatus.Has(code); got != want {
			t.Errorf("count_status has %d: got %v, want %v", code, got, want)
		}
	}
	if c.Table.Routes[0].Limits[1].CountStatus != nil {
		t.Errorf("api: got a count_status, want none")
	}

	o := c.Table.Routes[0].Limits[1].Overrides
	if o == nil || c.Overrides["api"] != o {
		t.Fatalf("api overrides: got %v (config has %v), want them", o, c.Overrides["api"])
	}
	cases := []struct {
		key, client string
		want        string // "": no match, "exempt", else the override's name, which holds its numbers
	}{
		{"pk-1|10.1.2.3", "10.1.2.3", "api#override:5000/1m0s/500"},
		{"pk-1|10.1.2.3", "10.20.30.40", "api#override:5000/1m0s/500"}, // the key's entry comes first
		{"x|10.20.30.40", "10.20.30.40", "exempt"},                     // /16 listed before /24
		{"x|192.0.2.7", "192.0.2.7", "api#override:7/1m0s/7"},
		{"x|192.0.2.7", "::ffff:192.0.2.7", "api#override:7/1m0s/7"},
		{"x|192.0.2.8", "192.0.2.8", ""},
		{"x|2001:db8:1::/64", "2001:db8:1::5", "exempt"},
		{"ordinary|10.20.1.1", "10.1.1.1", "api#override:100/1h0m0s/100"},
		{"ordinary|10.20.1.1", "10.20.1.1", "exempt"}, // clients entry 2 precedes keys entry 4
		{"pk-1", "10.1.2.3", ""},                      // a partial key is another key
	}
	for _, tc := range cases {
		got := ""
		if ov := o.Match([]byte(tc.key), netip.MustParseAddr(tc.client)); ov != nil {
			if ov.Exempt {
				got = "exempt"
			} else {
				got = ov.Policy.Name
			}
		}
		if got != tc.want {
			t.Errorf("key %q from %s: got %q, want %q", tc.key, tc.client, got, tc.want)
		}
	}
	// The admin API has a key alone: the policy keys on ip, so the key
	// holds the client address, by which clients: entries match.
	for key, want := range map[string]string{
		"pk-1|10.1.2.3":      "api#override:5000/1m0s/500",
		"x|10.20.30.40":      "exempt",
		"x|192.0.2.7":        "api#override:7/1m0s/7",
		"a|b|192.0.2.7":      "api#override:7/1m0s/7", // a value that holds '|'
		"x|192.0.2.8":        "",
		"x|2001:db8:1::/64":  "exempt",
		"ordinary|10.20.1.1": "exempt",
		"ordinary|not-an-ip": "",
	} {
		got := ""
		if ov := o.ForKey(key); ov != nil {
			if ov.Exempt {
				got = "exempt"
			} else {
				got = ov.Policy.Name
			}
		}
		if got != want {
			t.Errorf("ForKey(%q): got %q, want %q", key, got, want)
		}
	}
	shaped := c.Table.Routes[1].Limits[0]
	ov := shaped.Overrides.Match([]byte("127.0.0.1"), netip.MustParseAddr("127.0.0.1"))
	if ov == nil || ov.Policy.Queue != 50 || ov.Policy.MaxWait != 10*time.Second || ov.Policy.Name != "shaped#1#override:10/1s/50/10s" {
		t.Errorf("leaky override: got %+v, want queue 50, max_wait 10s, named shaped#1#override:10/1s/50/10s", ov)
	}
}

// TestOverrideMatchAllocs keeps an override lookup free of allocations.
func TestOverrideMatchAllocs(t *testing.T) {
	o := manyOverrides(t, 1000)
	key := []byte("key-500")
	client := netip.MustParseAddr("10.9.9.9")
	if n := testing.AllocsPerRun(1000, func() { o.Match(key, client) }); n != 0 {
		t.Errorf("got %v allocs per Match, want 0", n)
	}
}

// manyOverrides builds a policy with n key overrides and, after them, 100
// client prefixes of lengths 16 to 32.
func manyOverrides(t testing.TB, n int) *Overrides {
	t.Helper()
	var b strings.Builder
	b.WriteString("policies:\n  api:\n    algorithm: fixed_window\n    limit: 10\n    window: 1m\n    key: [header:K]\n    overrides:\n")
	for i := range n {
		fmt.Fprintf(&b, "      - {keys: [key-%d], limit: %d}\n", i, 100+i)
	}
	for i := range 100 {
		bits := 16 + i%17
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{172, byte(16 + i%16), byte(i), 0}), bits).Masked()
		fmt.Fprintf(&b, "      - {clients: [%q], limit: 5}\n", p.String())
	}
	b.WriteString("routes:\n  - name: r\n    upstream: http://127.0.0.1:9000\n    limits: [api]\n")
	c, err := Parse("bench.yaml", []byte(b.String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.Table.Routes[0].Limits[0].Overrides
}

// BenchmarkOverrideMatch compares a lookup among 10 and 10,000 key
// overrides: a map and a map per prefix length make them cost the same.
func BenchmarkOverrideMatch(b *testing.B) {
	for _, n := range []int{10, 10_000} {
		o := manyOverrides(b, n)
		for _, c := range []struct {
			name, key, client string
		}{
			{"key hit", "key-7", "10.0.0.1"},
			{"miss", "nobody", "10.0.0.1"},
		} {
			b.Run(fmt.Sprintf("%d keys/%s", n, c.name), func(b *testing.B) {
				key, client := []byte(c.key), netip.MustParseAddr(c.client)
				b.ReportAllocs()
				for b.Loop() {
					if o.Match(key, client) == nil && c.name == "key hit" {
						b.Fatal("no match")
					}
				}
			})
		}
	}
}

// TestForKeyFindsLongKeyOverride: /v1/limits takes a key whole or as the
// access log shows it, bounded to its digest past MaxKeyLen; an override
// that lists a long key is found by either.
func TestForKeyFindsLongKeyOverride(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", MaxKeyLen+10)
	c, err := Parse("long.yaml", []byte("policies:\n  p:\n    algorithm: fixed_window\n    limit: 1\n    window: 1m\n    key: [header:X-Token]\n    overrides:\n      - keys: ["+long+"]\n        limit: 9\nroutes:\n  - name: r\n    upstream: http://127.0.0.1:9\n    limits: [p]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{long, string(BoundKey([]byte(long), 0))} {
		if o := c.Overrides["p"].ForKey(key); o == nil || o.Policy.Limit != 9 {
			t.Errorf("ForKey(%.20q...): got %+v, want the override of limit 9", key, o)
		}
	}
}

// TestOverrideKeyHoldingPipe: beside ip, whose value never holds '|', one
// source may: a listed "monitor|v2|10.0.0.5" splits one way only, so it
// matches the agent "monitor|v2" from 10.0.0.5 and nothing else.
func TestOverrideKeyHoldingPipe(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
policies:
  per-agent:
    algorithm: fixed_window
    limit: 1
    window: 1m
    key: [header:User-Agent, ip]
    overrides:
      - keys: ["monitor|v2|10.0.0.5"]
        exempt: true
routes:
  - name: r
    upstream: http://127.0.0.1:9000
    limits: [per-agent]
`, nil)
	l := c.Table.Routes[0].Limits[0]
	for _, tc := range []struct {
		agent, client string
		exempt        bool
	}{
		{"monitor|v2", "10.0.0.5", true},
		{"monitor", "10.0.0.5", false},
		{"monitor|v2|10.0.0.5", "10.0.0.6", false},
		{"monitor|v2", "10.0.0.6", false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("User-Agent", tc.agent)
		client := netip.MustParseAddr(tc.client)
		k, err := l.Key.Append(nil, r, client, nil)
		if err != nil {
			t.Fatal(err)
		}
		ov := l.Overrides.Match(k, client)
		if got := ov != nil && ov.Exempt; got != tc.exempt {
			t.Errorf("agent %q from %s (key %q): exempt %v, want %v", tc.agent, tc.client, k, got, tc.exempt)
		}
	}
}

// TestOverrideKeyHostBesidePipe: a host never holds '|' (CanonicalHost
// refuses it), so beside header:Host a source that may hold '|' splits
// one way only: a listed "acme.example.com|ci|runner" is the tenant
// "ci|runner" on acme.example.com, a valid override, not an ambiguous one.
func TestOverrideKeyHostBesidePipe(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
policies:
  per-tenant:
    algorithm: fixed_window
    limit: 1
    window: 1m
    key: [header:Host, header:X-Tenant]
    overrides:
      - keys: ["acme.example.com|ci|runner"]
        exempt: true
routes:
  - name: r
    upstream: http://127.0.0.1:9000
    limits: [per-tenant]
`, nil)
	l := c.Table.Routes[0].Limits[0]
	for _, tc := range []struct {
		host, tenant string
		exempt       bool
	}{
		{"acme.example.com", "ci|runner", true},
		{"acme.example.com", "ci", false},
		{"other.example.com", "ci|runner", false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = tc.host
		r.Header.Set("X-Tenant", tc.tenant)
		k, err := l.Key.Append(nil, r, netip.MustParseAddr("192.0.2.1"), nil)
		if err != nil {
			t.Fatal(err)
		}
		ov := l.Overrides.Match(k, netip.MustParseAddr("192.0.2.1"))
		if got := ov != nil && ov.Exempt; got != tc.exempt {
			t.Errorf("tenant %q on %s (key %q): exempt %v, want %v", tc.tenant, tc.host, k, got, tc.exempt)
		}
	}
}
