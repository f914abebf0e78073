package routes

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/readmetext"
	"github.com/sluicehq/sluice/internal/tlsversion"
	"github.com/sluicehq/sluice/ratelimit"
)

// readmeDefault is what a default cell of README says: its first
// `code` span, without quotes, brackets and spaces.
func readmeDefault(cell string) string {
	if _, rest, ok := strings.Cut(cell, "`"); ok {
		cell, _, _ = strings.Cut(rest, "`")
	}
	return strings.NewReplacer(`"`, "", "[", "", "]", "", " ", "").Replace(cell)
}

// sameDefault reports whether README's default doc says code's value.
func sameDefault(doc string, code any) bool {
	switch v := code.(type) {
	case time.Duration:
		d, err := time.ParseDuration(doc)
		return err == nil && d == v
	case []string:
		return doc == strings.Join(v, ",")
	case int, int64:
		return strings.NewReplacer("_", "", ",", "").Replace(doc) == fmt.Sprint(v)
	default:
		return doc == fmt.Sprint(v)
	}
}

// TestREADMEDefaults keeps the default column of README's configuration
// reference saying what a configuration that leaves the field out gets.
func TestREADMEDefaults(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `
tls:
  acme:
    domains: [api.example.com]
policies:
  q: {algorithm: leaky_bucket, limit: 10, window: 1s, key: [ip]}
routes:
  - name: api
    upstream: http://127.0.0.1:9000
    limits: [q]
`, noEnv)
	p := c.Policies["q"]
	rt := c.Table.Routes[0]
	r := c.Store.Redis
	minVersion, _ := tlsversion.Parse("1.2")
	sections := []struct {
		heading string
		code    map[string]any
	}{
		{"### Top level", map[string]any{
			"listen":                 c.Listen,
			"admin":                  c.Admin,
			"admin_token":            c.AdminToken,
			"trusted_proxies":        []string{},
			"shutdown_timeout":       c.ShutdownTimeout,
			"client_header_timeout":  c.ClientHeaderTimeout,
			"client_body_timeout":    c.ClientBodyTimeout,
			"keepalive_timeout":      c.KeepaliveTimeout,
			"send_timeout":           c.SendTimeout,
			"websocket_idle_timeout": c.WebSocketIdleTimeout,
			"store":                  c.Store.Type,
		}},
		{"### `log`", map[string]any{
			"access_log":     c.Log.AccessLog,
			"log_keys":       c.Log.LogKeys,
			"flush_interval": c.Log.FlushInterval,
		}},
		{"### `tls`", map[string]any{
			"listen":        c.TLS.Listen,
			"redirect_http": c.TLS.RedirectHTTP,
			"min_version":   map[bool]string{true: "1.2"}[c.TLS.MinVersion == minVersion],
			"certificates":  []string{},
		}},
		{"#### `tls.acme`", map[string]any{
			"email":      c.TLS.ACME.Email,
			"ca":         c.TLS.ACME.CA,
			"ca_root":    c.TLS.ACME.CARoot,
			"storage":    c.TLS.ACME.Storage,
			"challenges": c.TLS.ACME.Challenges,
		}},
		{"### `store`", map[string]any{
			"type":            c.Store.Type,
			"memory.max_keys": c.Store.Memory.MaxKeys,
		}},
		{"#### `store.redis`", map[string]any{
			"mode":        r.Mode,
			"addresses":   r.Addresses,
			"master_name": r.MasterName,
			"username":    r.Username,
			"password":    r.Password,
			"db":          r.DB,
			"key_prefix":  r.KeyPrefix,
			"timeout":     r.Timeout,
			"on_error":    r.OnError,
		}},
		{"### `policies`", map[string]any{
			"queue":  p.Queue,
			"shadow": p.Shadow,
			"sync":   map[ratelimit.Sync]string{ratelimit.SyncPerRequest: "request"}[p.Sync],
		}},
		{"### `routes`", map[string]any{
			"timeout":      rt.Timeout,
			"strip_prefix": rt.StripPrefix,
		}},
	}
	for _, s := range sections {
		seen := map[string]bool{}
		for _, row := range readmetext.Tables(t, s.heading) {
			if len(row) < 4 {
				continue
			}
			field := strings.Trim(row[0], "`")
			code, ok := s.code[field]
			if !ok {
				continue
			}
			seen[field] = true
			if doc := readmeDefault(row[2]); !sameDefault(doc, code) {
				t.Errorf("README %s, %s: default %q, the code's is %v", s.heading, field, row[2], code)
			}
		}
		for field := range s.code {
			if !seen[field] {
				t.Errorf("README %s has no row for %s", s.heading, field)
			}
		}
	}
}

// TestREADMESlowClientBounds keeps README's table of bounds on slow and
// idle clients saying each field's default.
func TestREADMESlowClientBounds(t *testing.T) {
	t.Parallel()
	c := mustParse(t, minimal, noEnv)
	code := map[string]time.Duration{
		"client_header_timeout":  c.ClientHeaderTimeout,
		"client_body_timeout":    c.ClientBodyTimeout,
		"keepalive_timeout":      c.KeepaliveTimeout,
		"send_timeout":           c.SendTimeout,
		"websocket_idle_timeout": c.WebSocketIdleTimeout,
	}
	seen := map[string]bool{}
	for _, row := range readmetext.Tables(t, "### Slow and idle clients") {
		if len(row) != 3 || !strings.HasPrefix(row[2], "`") {
			continue
		}
		field := strings.Trim(row[2], "`")
		want, ok := code[field]
		if !ok {
			t.Errorf("README's slow-client table names %s, which is no timeout field", field)
			continue
		}
		seen[field] = true
		if !sameDefault(row[1], want) {
			t.Errorf("README's slow-client table: %s bound %q, its default is %v", field, row[1], want)
		}
	}
	for field := range code {
		if !seen[field] {
			t.Errorf("README's slow-client table has no row for %s", field)
		}
	}
}

// uncomment returns src with the commented block that starts with the
// line beginning first (such as "  # redis:") uncommented: that line and
// the lines after it that start with its "#" and three spaces.
func uncomment(t *testing.T, src, first string) string {
	t.Helper()
	lines := strings.Split(src, "\n")
	at := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, first) })
	if at < 0 {
		t.Fatalf("config.example.yaml has no line starting %q", first)
	}
	indent, _, _ := strings.Cut(first, "#")
	lines[at] = indent + strings.TrimPrefix(lines[at], indent+"# ")
	for i := at + 1; i < len(lines) && strings.HasPrefix(lines[i], indent+"#   "); i++ {
		lines[i] = indent + "  " + strings.TrimPrefix(lines[i], indent+"#   ")
	}
	return strings.Join(lines, "\n")
}

// TestExampleConfigCommentedBlocks: the blocks config.example.yaml shows
// commented out (tls, store.redis, a sync: lease policy) load once
// uncommented, so every field they show exists and every value is valid.
func TestExampleConfigCommentedBlocks(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := string(data)
	src = uncomment(t, src, "# tls:")
	src = uncomment(t, src, "  # redis:")
	src = uncomment(t, src, "  # global-api:")
	src = strings.Replace(src, "  type: memory ", "  type: redis  ", 1)
	dir := t.TempDir()
	writeCert(t, dir, "certs/api.pem", "certs/api-key.pem")
	path := filepath.Join(dir, "sluice.yaml")
	c, err := Parse(path, []byte(src), noEnv)
	if err != nil {
		t.Fatalf("got error\n%v\nwant none; the file:\n%s", err, src)
	}
	if c.TLS == nil || len(c.TLS.Certificates) != 1 || c.TLS.ACME == nil {
		t.Errorf("got tls %+v, want the example's certificate and acme", c.TLS)
	}
	if c.Store.Type != "redis" || c.Store.Redis.Password != "" {
		t.Errorf("got store %+v, want redis with the example's empty password", c.Store)
	}
	if p := c.Policies["global-api"]; p == nil || p.Sync != ratelimit.SyncLease {
		t.Errorf("got global-api %+v, want the example's sync: lease policy", p)
	}
}

// TestREADMEConfigFiles keeps every configuration README shows as a whole
// file (a yaml block with a top-level routes: or listen:, unless the text
// before it calls it a fragment) one that validate accepts, with the
// files it names beside it and no environment variable set.
func TestREADMEConfigFiles(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(readme), "\n")
	checked := 0
	for i := 0; i < len(lines); i++ {
		if lines[i] != "```yaml" {
			continue
		}
		start := i + 1
		end := start
		for end < len(lines) && lines[end] != "```" {
			end++
		}
		block := strings.Join(lines[start:end], "\n") + "\n"
		// The paragraph before the block says what it is.
		before := i - 1
		for before > 0 && lines[before-1] != "" {
			before--
		}
		intro := strings.Join(lines[max(before, 0):i], " ")
		i = end
		whole := func(l string) bool { return strings.HasPrefix(l, "routes:") || strings.HasPrefix(l, "listen:") }
		if !slices.ContainsFunc(lines[start:end], whole) || strings.Contains(intro, "fragment") {
			continue
		}
		checked++
		dir := t.TempDir()
		writeCert(t, dir, "certs/api.pem", "certs/api-key.pem")
		writeCert(t, dir, "pebble-ca.pem", "pebble-ca-key.pem")
		if _, err := Parse(filepath.Join(dir, "sluice.yaml"), []byte(block), nil); err != nil {
			t.Errorf("README.md:%d: the configuration there does not validate:\n%v", start+1, err)
		}
	}
	if checked < 4 {
		t.Errorf("found %d whole configurations in README, want at least 4", checked)
	}
}
