package server

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/routes"
)

// The listeners read their header and keep-alive bounds when they start, so
// a reload that changes them must say a restart is needed; the body timeout
// is the gateway's and applies at once, as does store.memory.max_keys.
func TestRestartNeededForClientTimeouts(t *testing.T) {
	t.Parallel()
	base := routes.Config{ClientHeaderTimeout: 10 * time.Second, ClientBodyTimeout: 30 * time.Second, KeepaliveTimeout: 2 * time.Minute, SendTimeout: time.Minute}
	base.Store.Type = "memory"
	base.TLS = &routes.TLS{ACME: &routes.ACME{Domains: []string{"a.example"}}}
	for _, tc := range []struct {
		name   string
		change func(*routes.Config)
		want   []string
	}{
		{"none", func(*routes.Config) {}, nil},
		{"header", func(c *routes.Config) { c.ClientHeaderTimeout = time.Second }, []string{"client_header_timeout"}},
		{"keepalive", func(c *routes.Config) { c.KeepaliveTimeout = time.Second }, []string{"keepalive_timeout"}},
		{"body", func(c *routes.Config) { c.ClientBodyTimeout = time.Second }, nil},
		// Each policy without a max_keys of its own takes it at load.
		{"memory max_keys", func(c *routes.Config) { c.Store.Memory.MaxKeys = 5 }, nil},
		{"store type", func(c *routes.Config) { c.Store.Type = "redis" }, []string{"store"}},
		// A memory store reads nothing of store.redis.
		// Each write takes it at once, the HTTP/2 listener's connection
		// bound at restart.
		{"send", func(c *routes.Config) { c.SendTimeout = time.Second }, []string{"send_timeout"}},
		{"acme", func(c *routes.Config) {
			c.TLS = &routes.TLS{ACME: &routes.ACME{Domains: []string{"b.example"}}}
		}, []string{"tls.acme"}},
		{"tls listen", func(c *routes.Config) {
			c.TLS = &routes.TLS{Listen: ":9443", ACME: &routes.ACME{Domains: []string{"a.example"}}}
		}, []string{"tls.listen"}},
		{"redis settings of a memory store", func(c *routes.Config) {
			c.Store.Redis.Password, c.Store.Redis.Timeout = "rotated", time.Second
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			next := base
			tc.change(&next)
			if got := restartNeeded(&base, &next); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
