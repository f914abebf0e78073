package routes

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

func noEnv(string) (string, bool) { return "", false }

func mustParse(t *testing.T, yaml string, env func(string) (string, bool)) *Config {
	t.Helper()
	c, err := Parse("sluice.yaml", []byte(yaml), env)
	if err != nil {
		t.Fatalf("got error\n%v\nwant none", err)
	}
	return c
}

const minimal = `
routes:
  - name: api
    upstream: http://127.0.0.1:9000
`

func TestDefaults(t *testing.T) {
	t.Parallel()
	c := mustParse(t, minimal, noEnv)
	checks := []struct {
		name      string
		got, want any
	}{
		{"Listen", c.Listen, ":8080"},
		{"Admin", c.Admin, "127.0.0.1:9091"},
		{"TrustedProxies", len(c.TrustedProxies), 0},
		{"ShutdownTimeout", c.ShutdownTimeout, 15 * time.Second},
		{"ClientHeaderTimeout", c.ClientHeaderTimeout, 10 * time.Second},
		{"ClientBodyTimeout", c.ClientBodyTimeout, 30 * time.Second},
		{"KeepaliveTimeout", c.KeepaliveTimeout, 120 * time.Second},
		{"TLS", c.TLS == nil, true},
		{"Store.Type", c.Store.Type, "memory"},
		{"Store.Memory.MaxKeys", c.Store.Memory.MaxKeys, 1_000_000},
		{"Store.Redis.Mode", c.Store.Redis.Mode, "standalone"},
		{"Store.Redis.Addresses", c.Store.Redis.Addresses, []string{"127.0.0.1:6379"}},
		{"Store.Redis.KeyPrefix", c.Store.Redis.KeyPrefix, "sluice:"},
		{"Store.Redis.Timeout", c.Store.Redis.Timeout, 50 * time.Millisecond},
		{"Store.Redis.OnError", c.Store.Redis.OnError, "local"},
		{"Store.Redis.DB", c.Store.Redis.DB, 0},
		{"Log.AccessLog", c.Log.AccessLog, true},
		{"Log.LogKeys", c.Log.LogKeys, false},
		{"Policies", len(c.Policies), 0},
		{"Routes", len(c.Table.Routes), 1},
		{"Route.Timeout", c.Table.Routes[0].Timeout, 30 * time.Second},
		{"Route.Upstreams", c.Table.Routes[0].Upstreams[0].String(), "http://127.0.0.1:9000"},
		{"Route.ReadsBody", c.Table.Routes[0].ReadsBody, false},
		{"Route.MaxBody", c.Table.Routes[0].MaxBody, int64(0)},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s: got %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestEmptyFile(t *testing.T) {
	t.Parallel()
	for _, src := range []string{"", "# only a comment\n", "---\n"} {
		c := mustParse(t, src, noEnv)
		if c.Listen != ":8080" || len(c.Table.Routes) != 0 || c.Table.Match(nil) != nil {
			t.Errorf("%q: got listen %q and %d routes, want defaults and none", src, c.Listen, len(c.Table.Routes))
		}
	}
}

func TestAdmin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ line, want string }{
		{"", "127.0.0.1:9091"},
		{`admin: ""`, ""},
		{`admin: "[::1]:9999"`, "[::1]:9999"},
		{`admin: ~`, "127.0.0.1:9091"},
	} {
		c := mustParse(t, tc.line+"\n"+minimal, noEnv)
		if c.Admin != tc.want {
			t.Errorf("%q: got admin %q, want %q", tc.line, c.Admin, tc.want)
		}
	}
}

func TestTopLevelFields(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
listen: 127.0.0.1:0
shutdown_timeout: 2s
client_header_timeout: 3s
client_body_timeout: 4s
keepalive_timeout: 5s
trusted_proxies: [10.0.0.0/8, 192.0.2.7, "2001:db8::/32", "::1"]
log: {access_log: false, log_keys: true, flush_interval: 1s}
store:
  type: redis
  memory: {max_keys: 1_000}
  redis:
    mode: sentinel
    addresses: [127.0.0.1:26379, 127.0.0.1:26380]
    master_name: mymaster
    username: sluice
    password: secret
    db: 3
    key_prefix: ""
    timeout: 20ms
    on_error: deny
`+minimal, noEnv)
	wantPrefixes := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("::1/128"),
	}
	want := Redis{
		Mode: "sentinel", Addresses: []string{"127.0.0.1:26379", "127.0.0.1:26380"}, MasterName: "mymaster",
		Username: "sluice", Password: "secret", DB: 3, KeyPrefix: "", Timeout: 20 * time.Millisecond, OnError: "deny",
	}
	switch {
	case c.Listen != "127.0.0.1:0":
		t.Errorf("got listen %q, want 127.0.0.1:0", c.Listen)
	case c.ShutdownTimeout != 2*time.Second:
		t.Errorf("got shutdown_timeout %v, want 2s", c.ShutdownTimeout)
	case c.ClientHeaderTimeout != 3*time.Second || c.ClientBodyTimeout != 4*time.Second || c.KeepaliveTimeout != 5*time.Second:
		t.Errorf("got client timeouts %v, %v, %v, want 3s, 4s, 5s", c.ClientHeaderTimeout, c.ClientBodyTimeout, c.KeepaliveTimeout)
	case !slices.Equal(c.TrustedProxies, wantPrefixes):
		t.Errorf("got trusted_proxies %v, want %v", c.TrustedProxies, wantPrefixes)
	case c.Log != Log{AccessLog: false, LogKeys: true, FlushInterval: time.Second}:
		t.Errorf("got log %+v, want access_log false, log_keys true, flush_interval 1s", c.Log)
	case c.Store.Type != "redis" || c.Store.Memory.MaxKeys != 1000:
		t.Errorf("got store %q with max_keys %d, want redis and 1000", c.Store.Type, c.Store.Memory.MaxKeys)
	case !reflect.DeepEqual(c.Store.Redis, want):
		t.Errorf("got redis %+v, want %+v", c.Store.Redis, want)
	}
}

func TestEnvExpansion(t *testing.T) {
	t.Parallel()
	env := func(name string) (string, bool) {
		v, ok := map[string]string{"PORT": "9001", "PW": "s3cr$t", "EMPTY": "", "WINDOW": "2m"}[name]
		return v, ok
	}
	c := mustParse(t, `
listen: ":${PORT}"
store:
  redis:
    password: "${PW}"
    username: "${REDIS_USER:-sluice}"
    key_prefix: "${EMPTY:-app}:"
    master_name: "$${LITERAL} costs $5"
policies:
  p: {algorithm: fixed_window, limit: "${LIMIT:-7}", window: "${WINDOW}", key: [ip]}
`+minimal, env)
	for _, ch := range []struct{ name, got, want string }{
		{"listen", c.Listen, ":9001"},
		{"password", c.Store.Redis.Password, "s3cr$t"},
		{"username", c.Store.Redis.Username, "sluice"},
		{"key_prefix", c.Store.Redis.KeyPrefix, "app:"},
		{"master_name", c.Store.Redis.MasterName, "${LITERAL} costs $5"},
	} {
		if ch.got != ch.want {
			t.Errorf("%s: got %q, want %q", ch.name, ch.got, ch.want)
		}
	}
	if p := c.Policies["p"]; p.Limit != 7 || p.Window != 2*time.Minute {
		t.Errorf("got limit %d window %v, want 7 and 2m", p.Limit, p.Window)
	}
}

func TestExpand(t *testing.T) {
	t.Parallel()
	env := func(name string) (string, bool) {
		v, ok := map[string]string{"A": "x", "EMPTY": ""}[name]
		return v, ok
	}
	for _, tc := range []struct{ in, want, err string }{
		{"plain", "plain", ""},
		{"${A}", "x", ""},
		{"a${A}b${A}c", "axbxc", ""},
		{"${EMPTY}", "", ""},
		{"${EMPTY:-d}", "d", ""},
		{"${UNSET:-}", "", ""},
		{"${UNSET:-a:-b}", "a:-b", ""},
		{"$A $ {A}", "$A $ {A}", ""},
		{"$${A}", "${A}", ""},
		{"${UNSET}", "", "environment variable UNSET is not set"},
		// Every unset variable is named at once, not one per run.
		{"${U1}:${A}:${U2}", "", "environment variable U1 is not set\nenvironment variable U2 is not set"},
		{"${U1}${A", "", "environment variable U1 is not set\nunterminated ${ in \"${A\""},
		{"${A", "", `unterminated ${ in "${A"`},
		{"${1A}", "", `invalid environment variable name "1A"`},
		{"${}", "", `invalid environment variable name ""`},
		{"${A:-${B}}", "", "nested ${ in the default of A is not supported"},
		{"${UNSET:-${A}}", "", "nested ${ in the default of UNSET is not supported"},
	} {
		got, err := expand(tc.in, env)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if got != tc.want || gotErr != tc.err {
			t.Errorf("expand(%q): got %q, %q; want %q, %q", tc.in, got, gotErr, tc.want, tc.err)
		}
	}
}

func TestPolicies(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
policies:
  shared: {algorithm: token_bucket, limit: 100, window: 1m, burst: 20, key: [header:X-API-Key, ip]}
  shaping: {algorithm: leaky_bucket, limit: 10, window: 1s, queue: 50, max_wait: 5s, key: [global]}
  unused: {algorithm: sliding_window_log, limit: 5, window: 10m, key: [json:phone], shadow: true, max_keys: 5_000}
store: {memory: {max_keys: 20_000}}
routes:
  - name: orders
    upstream: http://127.0.0.1:9000
    limits:
      - shaping
      - {algorithm: sliding_window_counter, limit: 600, window: 1m, key: [route, method]}
      - shared
      - {algorithm: fixed_window, limit: 5, window: 1s, key: [path]}
  - name: users
    upstream: http://127.0.0.1:9001
    limits: [shared]
`, noEnv)
	var names []string
	for n := range c.Policies {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"orders#2", "orders#4", "shaping", "shared", "unused"}; !slices.Equal(names, want) {
		t.Errorf("got policies %v, want %v", names, want)
	}
	orders, users := c.Table.Routes[0], c.Table.Routes[1]
	var got []string
	for _, l := range orders.Limits {
		got = append(got, l.Policy.Name+"="+l.Key.String())
	}
	if want := []string{"shaping=global", "orders#2=route|method", "shared=header:X-API-Key|ip", "orders#4=path"}; !slices.Equal(got, want) {
		t.Errorf("got limits %v, want %v", got, want)
	}
	if orders.Limits[2].Policy != users.Limits[0].Policy {
		t.Errorf("got distinct *Policy for shared on two routes, want one shared budget")
	}
	if c.Policies["orders#2"] != orders.Limits[1].Policy {
		t.Errorf("got Policies[orders#2] different from the route's limit, want the same")
	}
	want := ratelimit.Settings{Algorithm: ratelimit.LeakyBucket, Limit: 10, Window: time.Second, Queue: 50, MaxWait: 5 * time.Second}
	if s := c.Policies["shaping"].Settings(); s != want {
		t.Errorf("got shaping %+v, want %+v", s, want)
	}
	if p := c.Policies["shared"]; p.Burst != 20 || p.Algorithm != ratelimit.TokenBucket {
		t.Errorf("got shared burst %d algorithm %v, want 20 token_bucket", p.Burst, p.Algorithm)
	}
	if !c.Policies["unused"].Shadow {
		t.Errorf("got unused shadow false, want true")
	}
	// max_keys: a policy's own, else store.memory.max_keys, inline too.
	for name, want := range map[string]int{"unused": 5000, "shared": 20_000, "orders#2": 20_000} {
		if got := c.Policies[name].MaxKeys; got != want {
			t.Errorf("%s: got max_keys %d, want %d", name, got, want)
		}
	}
	if orders.ReadsBody || users.ReadsBody {
		t.Errorf("got ReadsBody true, want false: no json: source is used")
	}
}

func TestAnchorsAndMerge(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
policies:
  a: &a {algorithm: fixed_window, limit: 10, window: 1m, key: [ip]}
  b:
    <<: *a
    limit: 20
routes:
  - name: api
    upstream: http://127.0.0.1:9000
    limits: [a, b]
`, noEnv)
	if a, b := c.Policies["a"], c.Policies["b"]; a.Limit != 10 || b.Limit != 20 || b.Window != time.Minute || b.Algorithm != ratelimit.FixedWindow {
		t.Errorf("got a %+v b %+v, want b = a with limit 20", a.Settings(), b.Settings())
	}
}

// writeCert writes a self-signed certificate and key for api.test to dir.
func writeCert(t *testing.T, dir, certName, keyName string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		DNSNames:     []string{"api.test"},
		NotBefore:    time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(certName)), 0o755); err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	if err := os.WriteFile(filepath.Join(dir, certName), certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, keyName), keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeCert(t, dir, "certs/api.pem", "certs/api-key.pem")
	path := filepath.Join(dir, "sluice.yaml")
	src := `
tls:
  listen: 127.0.0.1:0
  redirect_http: true
  min_version: 1.3
  certificates:
    - cert_file: certs/api.pem
      key_file: certs/api-key.pem
  acme:
    domains: [API.example.com, www.example.com]
    email: ops@example.com
    ca_root: certs/api.pem
    challenges: [tls-alpn-01]
` + minimal
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatalf("got error %v, want none", err)
	}
	want := &TLS{
		Listen:       "127.0.0.1:0",
		RedirectHTTP: true,
		MinVersion:   tls.VersionTLS13,
		Certificates: []CertPair{{filepath.Join(dir, "certs/api.pem"), filepath.Join(dir, "certs/api-key.pem")}},
		ACME: &ACME{
			Domains:    []string{"api.example.com", "www.example.com"},
			Email:      "ops@example.com",
			CA:         LetsEncrypt,
			CARoot:     filepath.Join(dir, "certs/api.pem"),
			Storage:    filepath.Join(dir, "data/certs"),
			Challenges: []string{"tls-alpn-01"},
		},
	}
	if !reflect.DeepEqual(c.TLS, want) {
		t.Errorf("got tls %+v acme %+v, want %+v acme %+v", c.TLS, c.TLS.ACME, want, want.ACME)
	}

	c = mustParse(t, "tls: {acme: {domains: [api.example.com], storage: /var/lib/sluice}}\n"+minimal, noEnv)
	if c.TLS.Listen != ":8443" || c.TLS.MinVersion != tls.VersionTLS12 || c.TLS.RedirectHTTP || c.TLS.ACME.Storage != "/var/lib/sluice" ||
		!slices.Equal(c.TLS.ACME.Challenges, []string{"http-01", "tls-alpn-01"}) {
		t.Errorf("got tls %+v acme %+v, want defaults and absolute storage kept", c.TLS, c.TLS.ACME)
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.HasPrefix(err.Error(), "reading config: open ") {
		t.Errorf("got error %v, want reading config: open ...", err)
	}
}

// TestExampleConfig keeps the shipped example valid and complete.
func TestExampleConfig(t *testing.T) {
	t.Parallel()
	c, err := Load("../config.example.yaml")
	if err != nil {
		t.Fatalf("got error\n%v\nwant none", err)
	}
	algs := map[ratelimit.Algorithm]bool{}
	for _, p := range c.Policies {
		algs[p.Algorithm] = true
	}
	for _, a := range ratelimit.Algorithms {
		if !algs[a] {
			t.Errorf("example has no %v policy", a)
		}
	}
	kinds := map[sourceKind]bool{}
	for _, rt := range c.Table.Routes {
		for _, l := range rt.Limits {
			for _, s := range l.Key.sources {
				kinds[s.kind] = true
			}
		}
		for _, u := range rt.Upstreams {
			if u.Hostname() != "127.0.0.1" {
				t.Errorf("route %s: got upstream %v, want one on 127.0.0.1", rt.Name, u)
			}
		}
	}
	for k := srcIP; k <= srcGlobal; k++ {
		if k != srcHost && !kinds[k] {
			t.Errorf("example uses no key source of kind %d", k)
		}
	}
}

// TestTLSPairBlamesFileAtFault: validation names the file at fault, at
// its own field, with the message the gateway gives when it loads the
// pair: a key that is no key is the key_file's fault, not cert_file's.
func TestTLSPairBlamesFileAtFault(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeCert(t, dir, "api.pem", "api-key.pem")
	if err := os.WriteFile(filepath.Join(dir, "garbage.pem"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	src := "tls:\n  certificates:\n    - cert_file: api.pem\n      key_file: garbage.pem\n" + minimal
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	want := path + ":4:17: tls.certificates[0].key_file: loading key garbage.pem: no PEM private key block found"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// TestLimitsSingleName: a route's limits, a list of policy names, may be
// written as one name, as every list of strings may (key: ip is [ip]).
func TestLimitsSingleName(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
policies:
  per-ip: {algorithm: fixed_window, limit: 5, window: 1m, key: ip}
routes:
  - name: api
    upstream: http://127.0.0.1:9000
    limits: per-ip
`, noEnv)
	var got []string
	for _, l := range c.Table.Routes[0].Limits {
		got = append(got, l.Policy.Name)
	}
	if want := []string{"per-ip"}; !slices.Equal(got, want) {
		t.Errorf("got limits %v, want %v", got, want)
	}
	_, err := Parse("sluice.yaml", []byte(`
routes:
  - name: api
    upstream: http://127.0.0.1:9000
    limits: nope
`), noEnv)
	if want := `sluice.yaml:5:13: routes[0].limits[0]: unknown policy "nope"`; err == nil || err.Error() != want {
		t.Errorf("got error %v, want %s", err, want)
	}
}
