package routes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// testEnv is the environment the bad_* fixtures are parsed with.
func testEnv(name string) (string, bool) {
	v, ok := map[string]string{"UPSTREAM": "http://127.0.0.1:9100"}[name]
	return v, ok
}

// badConfigs holds the exact error text of every testdata/bad_*.yaml.
var badConfigs = []struct {
	file string
	want string
}{
	{"bad_acme.yaml", `testdata/bad_acme.yaml:3:14: tls.acme.domains: must list at least one domain
testdata/bad_acme.yaml:4:12: tls.acme.email: invalid email address "ops"
testdata/bad_acme.yaml:5:9: tls.acme.ca: invalid ACME directory URL "http://acme.example.com/directory": want https://host/path
testdata/bad_acme.yaml:6:14: tls.acme.ca_root: loading CA root missing-root.pem: open testdata/missing-root.pem: no such file or directory
testdata/bad_acme.yaml:7:18: tls.acme.challenges[0]: unknown challenge "dns-01" (want http-01 or tls-alpn-01)
testdata/bad_acme.yaml:7:35: tls.acme.challenges[2]: challenge "http-01" is listed twice`},
	{"bad_admin_token.yaml", `testdata/bad_admin_token.yaml:1:14: admin_token: must not hold spaces or control characters (a newline at the end of a secret read from a file?): no Authorization header could carry it`},
	{"bad_address.yaml", `testdata/bad_address.yaml:1:9: listen: invalid address "8080": want host:port, like :8080 or 127.0.0.1:8080
testdata/bad_address.yaml:2:8: admin: invalid port in "localhost:99999": want a number from 0 to 65535
testdata/bad_address.yaml:4:11: tls.listen: invalid port in ":https": want a number from 0 to 65535`},
	{"bad_both_upstreams.yaml", `testdata/bad_both_upstreams.yaml:4:5: routes[0].upstreams: set upstream or upstreams, not both`},
	{"bad_burst.yaml", `testdata/bad_burst.yaml:6:12: policies.per-ip.burst: only token_bucket has a burst
testdata/bad_burst.yaml:12:15: policies.per-key.max_wait: only leaky_bucket has a max_wait
testdata/bad_burst.yaml:18:12: policies.shaped.queue: only leaky_bucket has a queue`},
	{"bad_client_timeouts.yaml", `testdata/bad_client_timeouts.yaml:1:24: client_header_timeout: must be > 0
testdata/bad_client_timeouts.yaml:2:22: client_body_timeout: invalid duration "10" (want a number and a unit, like 500ms, 1m or 1h)
testdata/bad_client_timeouts.yaml:3:20: keepalive_timeout: must be > 0`},
	{"bad_count_status.yaml", `testdata/bad_count_status.yaml:7:25: policies.logins.count_status[1]: invalid status "4x": want a code from 100 to 599 or a class like 4xx
testdata/bad_count_status.yaml:7:29: policies.logins.count_status[2]: invalid status "600": want a code from 100 to 599 or a class like 4xx
testdata/bad_count_status.yaml:8:12: policies.logins.block: must be > 0
testdata/bad_count_status.yaml:14:19: policies.shaped.count_status: not allowed on leaky_bucket: a request that left the queue cannot be undone
testdata/bad_count_status.yaml:20:19: policies.empty.count_status: must list at least one status, like [401, 403] or [4xx]`},
	// Limits the Redis store's doubles cannot count, intervals below a
	// nanosecond, and a number past int64.
	{"bad_huge_limit.yaml", `testdata/bad_huge_limit.yaml:4:12: policies.per-ip.limit: must be at most 999999999999999: RateLimit-Policy gives it as a Structured Field integer, of at most 15 digits
testdata/bad_huge_limit.yaml:14:16: policies.per-key.overrides[0].limit: must be at most 999999999999999: RateLimit-Policy gives it as a Structured Field integer, of at most 15 digits
testdata/bad_huge_limit.yaml:17:12: policies.shaping.limit: the interval window / limit is 0.1ns, not a whole number of microseconds; rounded up to 1µs it would admit 99.99% fewer requests than 10000000000 per 1s (at most 0.1% is allowed)
testdata/bad_huge_limit.yaml:22:12: policies.queue.limit: the interval window / limit is 0.5ns, not a whole number of microseconds; rounded up to 1µs it would admit 99.95% fewer requests than 2000000 per 1ms (at most 0.1% is allowed)
testdata/bad_huge_limit.yaml:27:12: policies.beyond.limit: 99999999999999999999 is out of range: whole numbers here lie from -9223372036854775808 to 9223372036854775807
testdata/bad_huge_limit.yaml:36:48: routes[0].limits[2].limit: must be at most 999999999999999: RateLimit-Policy gives it as a Structured Field integer, of at most 15 digits`},
	{"bad_override_zero.yaml", `testdata/bad_override_zero.yaml:9:16: policies.api.overrides[0].burst: must be > 0; leave it out for the policy's`},
	// A field an override leaves to the policy may not fit the numbers
	// the override sets; the override is refused, not dropped.
	{"bad_override_spans.yaml", `testdata/bad_override_spans.yaml:10:9: policies.api.overrides[0].burst: burst x interval (20 x 876000h0m0s) must be at most 100 years: the bucket could not be counted (with this override's numbers)
testdata/bad_override_spans.yaml:14:9: policies.api.overrides[1].limit: the interval window / limit is 10.1µs, not a whole number of microseconds; rounded up to 11µs it would admit 8.18% fewer requests than 100 per 1.01ms (at most 0.1% is allowed) (with this override's numbers)`},
	// On a composite key a listed value has one part per source: with more,
	// a guesser could split it otherwise ("svc" and "ci|runner") and match
	// as a consumer the override does not name; with fewer nothing matches.
	// A policy of one source, or of one source beside ip, may hold '|'.
	{"bad_override_parts.yaml", `testdata/bad_override_parts.yaml:9:16: policies.logins.overrides[0].keys[0]: want 2 values joined by "|", one per key source (json:username|header:X-Device), got 3: with more than one source that may hold "|", other values would match it
testdata/bad_override_parts.yaml:9:43: policies.logins.overrides[0].keys[2]: want 2 values joined by "|", one per key source (json:username|header:X-Device), got 1: no request would match it`},
	// A key value at the place of an ip or header:Host source is written
	// as the key holds it (an IPv6 client as its /64, a host canonical),
	// or nothing matches it.
	{"bad_override_client.yaml", `testdata/bad_override_client.yaml:8:16: policies.per-ip.overrides[0].keys[0]: the key holds the client "2001:db8:1:2::5" as "2001:db8:1:2::/64" (an IPv6 client as its /64): write that, or list the address under clients:
testdata/bad_override_client.yaml:8:35: policies.per-ip.overrides[0].keys[1]: the key holds the client "::ffff:192.0.2.1" as "192.0.2.1" (an IPv4-mapped address as IPv4): write that, or list the address under clients:
testdata/bad_override_client.yaml:8:55: policies.per-ip.overrides[0].keys[2]: "2001:db8::/48" is no client address, as the key holds one there (ip): no request would match it; list ranges under clients:
testdata/bad_override_client.yaml:8:72: policies.per-ip.overrides[0].keys[3]: "partner" is no client address, as the key holds one there (ip): no request would match it; list ranges under clients:
testdata/bad_override_client.yaml:8:117: policies.per-ip.overrides[0].keys[6]: want 1 values joined by "|", one per key source (ip), got 2: no request would match it
testdata/bad_override_client.yaml:16:16: policies.per-user-ip.overrides[0].keys[0]: the key holds the client "2001:db8:0:0:0:0:0:1" as "2001:db8::/64" (an IPv6 client as its /64): write that, or list the address under clients:
testdata/bad_override_client.yaml:16:65: policies.per-user-ip.overrides[0].keys[2]: the key holds the client "2001:db8:0:0:0:0:0:1" as "2001:db8::/64" (an IPv6 client as its /64): write that, or list the address under clients:
testdata/bad_override_client.yaml:24:35: policies.per-host.overrides[0].keys[1]: the key holds the host "API.example.com" as "api.example.com" (lower case, without a trailing dot or the scheme's default port): write that
testdata/bad_override_client.yaml:24:100: policies.per-host.overrides[0].keys[4]: "api.example.com;x" is no host, as the key holds one there (header:Host): no request would match it`},
	{"bad_overrides.yaml", `testdata/bad_overrides.yaml:9:9: policies.api.overrides[0].clients: set keys or clients, not both
testdata/bad_overrides.yaml:11:19: policies.api.overrides[1].clients[0]: invalid CIDR "10.20.1.0/16": host bits are set (did you mean 10.20.0.0/16?)
testdata/bad_overrides.yaml:11:44: policies.api.overrides[1].clients[2]: invalid CIDR "nonsense": want an address or prefix, like 10.0.0.0/8 or 192.0.2.7
testdata/bad_overrides.yaml:13:16: policies.api.overrides[1].limit: not allowed beside exempt: true
testdata/bad_overrides.yaml:15:16: policies.api.overrides[2].burst: only token_bucket has a burst
testdata/bad_overrides.yaml:16:16: policies.api.overrides[2].queue: only leaky_bucket has a queue
testdata/bad_overrides.yaml:17:9: policies.api.overrides[3]: sets nothing: give limit, window, burst, queue or max_wait, or exempt: true
testdata/bad_overrides.yaml:18:9: policies.api.overrides[4]: needs keys (key values) or clients (addresses or CIDRs)
testdata/bad_overrides.yaml:20:16: policies.api.overrides[5].limit: must be > 0
testdata/bad_overrides.yaml:21:17: policies.api.overrides[5].window: invalid duration "soon" (want a number and a unit, like 500ms, 1m or 1h)
testdata/bad_overrides.yaml:22:9: policies.api.overrides[5].colour: unknown field
testdata/bad_overrides.yaml:23:16: policies.api.overrides[6].keys[0]: an empty key value (or an empty part of one) matches the requests that lack that key source; is a ${VARIABLE} in it empty?
testdata/bad_overrides.yaml:23:42: policies.api.overrides[6].keys[1]: an empty key value (or an empty part of one) matches the requests that lack that key source; is a ${VARIABLE} in it empty?`},
	{"bad_cidr.yaml", `testdata/bad_cidr.yaml:3:5: trusted_proxies[1]: invalid CIDR "10.0.0.0/33": want an address or prefix, like 10.0.0.0/8 or 192.0.2.7
testdata/bad_cidr.yaml:4:5: trusted_proxies[2]: invalid CIDR "192.168.1.1/16": host bits are set (did you mean 192.168.0.0/16?)
testdata/bad_cidr.yaml:5:5: trusted_proxies[3]: invalid CIDR "not-an-ip": want an address or prefix, like 10.0.0.0/8 or 192.0.2.7`},
	{"bad_duplicate_field.yaml", `testdata/bad_duplicate_field.yaml:5:1: listen: duplicate field (first at line 1)`},
	{"bad_duplicate_limit.yaml", `testdata/bad_duplicate_limit.yaml:6:22: routes[0].limits[1]: policy "per-ip" is already listed as routes[0].limits[0]`},
	{"bad_duplicate_route.yaml", `testdata/bad_duplicate_route.yaml:4:11: routes[1].name: duplicate route name "api" (first at line 2)
testdata/bad_duplicate_route.yaml:6:5: routes[2].name: required`},
	{"bad_duration.yaml", `testdata/bad_duration.yaml:1:19: shutdown_timeout: invalid duration "15" (want a number and a unit, like 500ms, 1m or 1h)
testdata/bad_duration.yaml:6:13: policies.per-ip.window: invalid duration "10x" (want a number and a unit, like 500ms, 1m or 1h)
testdata/bad_duration.yaml:8:12: policies.per-ip.block: invalid duration "1 h" (write 1h, without spaces)
testdata/bad_duration.yaml:12:14: routes[0].timeout: must be > 0`},
	{"bad_flush_interval.yaml", `testdata/bad_flush_interval.yaml:5:19: log.flush_interval: must be >= 0`},
	{"bad_chain_cert.yaml", `testdata/bad_chain_cert.yaml:3:18: tls.certificates[0].cert_file: loading certificate chain.pem: certificate 2 of the chain: x509: malformed certificate`},
	{"bad_garbled_cert.yaml", `testdata/bad_garbled_cert.yaml:3:18: tls.certificates[0].cert_file: loading certificate garbled.pem: no PEM certificate block found`},
	{"bad_key_source.yaml", `testdata/bad_key_source.yaml:6:15: policies.per-thing.key[1]: unknown key source "user" (want ip, header:NAME, query:NAME, cookie:NAME, json:FIELD, route, method, path or global)
testdata/bad_key_source.yaml:6:21: policies.per-thing.key[2]: invalid header name "" in key source "header:"
testdata/bad_key_source.yaml:6:32: policies.per-thing.key[3]: invalid JSON field "a..b" in key source "json:a..b": want a name or a dotted path, like json:user.id
testdata/bad_key_source.yaml:10:79: routes[0].limits[1].key[0]: must be a single value, not a mapping (write header:X-API-Key, without a space after the colon)
testdata/bad_key_source.yaml:18:13: routes[1].limits[0].key[0]: must be a single value, not a mapping (write json:phone, without a space after the colon)`},
	{"bad_match.yaml", `testdata/bad_match.yaml:5:13: routes[0].match.host: invalid host "api.example.com:8443": want a name like api.example.com or *.example.com, without port
testdata/bad_match.yaml:6:13: routes[0].match.path: must start with /
testdata/bad_match.yaml:7:7: routes[0].match.path_prefix: set path or path_prefix, not both
testdata/bad_match.yaml:8:17: routes[0].match.methods[0]: invalid method "GE T"
testdata/bad_match.yaml:8:25: routes[0].match.methods[1]: sluice does not forward CONNECT (it answers 501)
testdata/bad_match.yaml:9:17: routes[0].match.headers.Host: match the host with match.host
testdata/bad_match.yaml:9:46: routes[0].match.headers.x-a: header X-A is listed twice`},
	{"bad_max_body.yaml", `testdata/bad_max_body.yaml:4:15: routes[0].max_body: invalid size "10MB/s" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)
testdata/bad_max_body.yaml:7:15: routes[1].max_body: must be > 0 (leave it out for no limit)
testdata/bad_max_body.yaml:10:15: routes[2].max_body: size "1.5B" is not a whole number of bytes
testdata/bad_max_body.yaml:13:15: routes[3].max_body: size "9000000000GiB" is too large
testdata/bad_max_body.yaml:16:15: routes[4].max_body: invalid size "-5" (want bytes, or a number and a unit: B, KB, MB, GB, KiB, MiB, GiB, like 10MiB)
testdata/bad_max_body.yaml:19:15: routes[5].max_body: must be a single value, not a list`},
	{"bad_key_prefix.yaml", `testdata/bad_key_prefix.yaml:3:54: store.redis.key_prefix: must not contain { or }`},
	{"bad_match_path.yaml", `testdata/bad_match_path.yaml:4:19: routes[0].match.path: must be a canonical path, without //, . or .. segments, ; or \
testdata/bad_match_path.yaml:4:45: routes[0].match.case_sensitive: must be true or false, not "maybe"
testdata/bad_match_path.yaml:7:26: routes[1].match.path_prefix: must be a canonical path, without //, . or .. segments, ; or \
testdata/bad_match_path.yaml:10:19: routes[2].match.path: must be a canonical path, without //, . or .. segments, ; or \`},
	{"bad_min_version.yaml", `testdata/bad_min_version.yaml:2:16: tls.min_version: unknown TLS version "1.4" (want 1.0, 1.1, 1.2 or 1.3)`},
	{"bad_missing_cert.yaml", `testdata/bad_missing_cert.yaml:3:18: tls.certificates[0].cert_file: loading certificate certs/api.pem: open testdata/certs/api.pem: no such file or directory
testdata/bad_missing_cert.yaml:4:17: tls.certificates[0].key_file: loading key certs/api-key.pem: open testdata/certs/api-key.pem: no such file or directory`},
	{"bad_missing_fields.yaml", `testdata/bad_missing_fields.yaml:2:9: policies.empty: must be a mapping with algorithm, limit, window and key
testdata/bad_missing_fields.yaml:4:5: policies.partial.limit: required
testdata/bad_missing_fields.yaml:4:5: policies.partial.window: required
testdata/bad_missing_fields.yaml:4:5: policies.partial.key: must list at least one key source, like [ip] or [header:X-API-Key]
testdata/bad_missing_fields.yaml:8:23: routes[0].limits[1].algorithm: required
testdata/bad_missing_fields.yaml:8:23: routes[0].limits[1].window: required
testdata/bad_missing_fields.yaml:8:23: routes[0].limits[1].key: must list at least one key source, like [ip] or [header:X-API-Key]`},
	{"bad_missing_upstream.yaml", `testdata/bad_missing_upstream.yaml:2:5: routes[0].upstream: required (or upstreams)
testdata/bad_missing_upstream.yaml:5:16: routes[1].upstreams: must list at least one upstream`},
	{"bad_names.yaml", `testdata/bad_names.yaml:2:3: policies.a#b: invalid name "a#b": use letters, digits and punctuation other than # | " \
testdata/bad_names.yaml:3:3: policies.c|d: invalid name "c|d": use letters, digits and punctuation other than # | " \
testdata/bad_names.yaml:5:11: routes[0].name: invalid name "my route": use letters, digits and punctuation other than # | " \
testdata/bad_names.yaml:7:11: routes[1].name: "(unmatched)" is the route label of requests no route matched: choose another name`},
	{"bad_hop_by_hop.yaml", `testdata/bad_hop_by_hop.yaml:3:23: routes[0].match.headers.Keep-Alive: Keep-Alive is a hop-by-hop field: the upstream never gets it, so no route may match on it
testdata/bad_hop_by_hop.yaml:6:64: routes[0].limits[0].key[0]: key source "header:proxy-authorization": Proxy-Authorization is a hop-by-hop field: the upstream never gets it`},
	{"bad_underscore_header.yaml", `testdata/bad_underscore_header.yaml:3:23: routes[0].match.headers.X_Tier: X_Tier contains "_": sluice drops such fields before matching, as nginx does, so no route may match on it
testdata/bad_underscore_header.yaml:6:64: routes[0].limits[0].key[0]: key source "header:X_Api_Key": X_Api_Key contains "_": sluice drops such fields before keying, as nginx does, so its value would always be empty`},
	{"bad_shadowed_route.yaml", `testdata/bad_shadowed_route.yaml:3:32: routes[1].match.path: never matched: routes[0] (pre) comes first, and its path_prefix /v1/pre/ takes every request this route matches (a path_prefix that ends in / also takes the path without it): put this route before it
testdata/bad_shadowed_route.yaml:5:41: routes[3].match.path_prefix: never matched: routes[2] (v2) comes first, and its path_prefix /v2/ takes every request this route matches: put this route before it
testdata/bad_shadowed_route.yaml:11:35: routes[9].match.path: never matched: routes[8] (v5) comes first, and its path_prefix /V5/ takes every request this route matches (a path_prefix that ends in / also takes the path without it): put this route before it`},
	{"bad_dotted_header.yaml", `testdata/bad_dotted_header.yaml:3:23: routes[0].match.headers.X.Tier: X.Tier contains ".": sluice drops such fields before matching, as nginx does, so no route may match on it
testdata/bad_dotted_header.yaml:6:64: routes[0].limits[0].key[0]: key source "header:X.Api.Key": X.Api.Key contains ".": sluice drops such fields before keying, as nginx does, so its value would always be empty`},
	{"bad_listeners.yaml", `testdata/bad_listeners.yaml:1:9: listen: ":9091" overlaps admin ("127.0.0.1:9091", the default): two listeners cannot bind one address and port
testdata/bad_listeners.yaml:3:11: tls.listen: "[::ffff:127.0.0.1]:9091" overlaps listen (":9091"): two listeners cannot bind one address and port`},
	{"bad_max_keys.yaml", `testdata/bad_max_keys.yaml:2:80: policies.per-ip.max_keys: must be > 0
testdata/bad_max_keys.yaml:3:98: policies.per-phone.max_keys: must be a whole number, not "many"
testdata/bad_max_keys.yaml:9:78: routes[0].limits[1].max_keys: must be > 0`},
	{"bad_negative_limit.yaml", `testdata/bad_negative_limit.yaml:4:12: policies.per-ip.limit: must be > 0
testdata/bad_negative_limit.yaml:6:12: policies.per-ip.burst: must be > 0; leave it out for the default, limit`},
	// A negative burst or max_wait is told what 0 is told: 0 is no
	// better.
	{"bad_negative_wait.yaml", `testdata/bad_negative_wait.yaml:7:15: policies.shaped.max_wait: must be > 0; leave it out for the default, queue x interval, or set queue: 0 to reject whatever cannot leave at once
testdata/bad_negative_wait.yaml:11:19: policies.shaped.overrides[0].max_wait: must be > 0; leave it out for the policy's
testdata/bad_negative_wait.yaml:19:16: policies.api.overrides[0].burst: must be > 0; leave it out for the policy's`},
	{"bad_on_error.yaml", `testdata/bad_on_error.yaml:4:15: store.redis.on_error: unknown on_error "ignore" (want local, allow or deny)
testdata/bad_on_error.yaml:5:14: store.redis.timeout: must be > 0`},
	{"bad_sentinel.yaml", `testdata/bad_sentinel.yaml:4:11: store.redis.master_name: required in sentinel mode`},
	{"bad_sections.yaml", `testdata/bad_sections.yaml:1:6: tls: must be a mapping, not a scalar
testdata/bad_sections.yaml:2:8: store: must be a mapping, not a scalar
testdata/bad_sections.yaml:3:6: log: must be a mapping, not a list
testdata/bad_sections.yaml:5:3: policies: must be a mapping, not a list
testdata/bad_sections.yaml:9:12: routes[0].match: must be a mapping, not a scalar
testdata/bad_sections.yaml:11:8: routes[0].limits[0]: must be a policy name or a policy mapping
testdata/bad_sections.yaml:12:9: routes[0].limits[1]: must be a mapping, not a list
testdata/bad_sections.yaml:13:5: routes[1]: must be a mapping, not a scalar`},
	{"bad_store.yaml", `testdata/bad_store.yaml:2:9: store.type: unknown store type "etcd" (want memory or redis)
testdata/bad_store.yaml:3:22: store.memory.max_keys: must be > 0
testdata/bad_store.yaml:4:17: store.redis.mode: unknown mode "ring" (want standalone, cluster or sentinel)
testdata/bad_store.yaml:4:27: store.redis.db: must be >= 0
testdata/bad_store.yaml:4:43: store.redis.addresses[0]: invalid address "localhost": want host:port, like :8080 or 127.0.0.1:8080`},
	{"bad_sync.yaml", `testdata/bad_sync.yaml:5:71: policies.unknown.sync: unknown sync "always" (want request or lease)
testdata/bad_sync.yaml:11:11: policies.queued.sync: lease works with fixed_window, token_bucket and sliding_window_counter, not leaky_bucket
testdata/bad_sync.yaml:17:11: policies.logins.sync: lease works with fixed_window, token_bucket and sliding_window_counter, not sliding_window_log
testdata/bad_sync.yaml:24:11: policies.blocking.sync: lease does not support block: a block would need a Redis call per rejected request
testdata/bad_sync.yaml:29:75: routes[0].limits[0].sync: lease works with fixed_window, token_bucket and sliding_window_counter, not leaky_bucket`},
	// Both of a lease's problems at once, not the second after the first
	// is fixed.
	{"bad_sync_memory.yaml", `testdata/bad_sync_memory.yaml:7:11: policies.global.sync: lease needs store.type: redis (the memory store has no instances to share with)
testdata/bad_sync_memory.yaml:13:11: policies.logins.sync: lease needs store.type: redis (the memory store has no instances to share with)
testdata/bad_sync_memory.yaml:13:11: policies.logins.sync: lease works with fixed_window, token_bucket and sliding_window_counter, not sliding_window_log`},
	// The parser names only where the block that a misindented line
	// breaks starts; the line itself is the place to look.
	// A window, block or max_wait too long for Go is told the bound it
	// must meet, 100 years, not Go's; one over 100 years is told once.
	{"bad_huge_window.yaml", `testdata/bad_huge_window.yaml:5:13: policies.yearly.window: invalid duration "100000000h": too long (at most 100 years, 876000h0m0s)
testdata/bad_huge_window.yaml:11:12: policies.long-block.block: invalid duration "9999999999h": too long (at most 100 years, 876000h0m0s)
testdata/bad_huge_window.yaml:18:15: policies.long-wait.max_wait: invalid duration "9999999999h": too long (at most 100 years, 876000h0m0s)
testdata/bad_huge_window.yaml:23:13: policies.centuries.window: must be at most 100 years (876000h0m0s)
testdata/bad_huge_window.yaml:27:17: policies.centuries.overrides[0].window: invalid duration "9999999999h": too long (at most 100 years, 876000h0m0s)`},
	{"bad_indent.yaml", `testdata/bad_indent.yaml:6:1: syntax error: did not find expected key (check this line's indentation: the mapping it breaks starts at line 2)`},
	{"bad_indent_route.yaml", `testdata/bad_indent_route.yaml:6:1: syntax error: did not find expected '-' indicator (check this line's indentation: the list it breaks starts at line 2)`},
	{"bad_indent_value.yaml", `testdata/bad_indent_value.yaml:6:1: syntax error: mapping values are not allowed in this context (this line is indented deeper than line 5, whose value is already given: check its indentation)`},
	{"bad_syntax.yaml", `testdata/bad_syntax.yaml:4:1: syntax error: mapping values are not allowed in this context (a value that holds ": " must be quoted)`},
	{"bad_tls_empty.yaml", `testdata/bad_tls_empty.yaml:2:3: tls: needs certificates or acme`},
	// The first document is checked all the same: one run, every problem.
	{"bad_two_documents.yaml", `testdata/bad_two_documents.yaml:4:14: routes[0].timeout: must be > 0
testdata/bad_two_documents.yaml:5:1: a config file holds one YAML document, not 2`},
	{"bad_two_leaky.yaml", `testdata/bad_two_leaky.yaml:13:9: routes[0].limits[1]: a route has at most one leaky_bucket limit (the first is routes[0].limits[0])`},
	// Route checks see invalid policies too, so that one run reports all.
	{"bad_two_leaky_invalid.yaml", `testdata/bad_two_leaky_invalid.yaml:4:12: policies.shaping.limit: must be > 0
testdata/bad_two_leaky_invalid.yaml:13:9: routes[0].limits[1]: a route has at most one leaky_bucket limit (the first is routes[0].limits[0])
testdata/bad_two_leaky_invalid.yaml:14:9: routes[0].limits[2]: a route has at most one leaky_bucket limit (the first is routes[0].limits[0])
testdata/bad_two_leaky_invalid.yaml:14:53: routes[0].limits[2].window: must be > 0`},
	{"bad_types.yaml", `testdata/bad_types.yaml:1:9: listen: must be a single value, not a list
testdata/bad_types.yaml:2:19: log.access_log: must be true or false, not "maybe"
testdata/bad_types.yaml:6:12: policies.per-ip.limit: must be a whole number, not "ten"
testdata/bad_types.yaml:8:10: policies.per-ip.key: must be a list, not a mapping
testdata/bad_types.yaml:9:13: policies.per-ip.shadow: must be true or false, not "yes"
testdata/bad_types.yaml:11:3: routes: must be a list, not a mapping`},
	{"bad_unknown_algorithm.yaml", `testdata/bad_unknown_algorithm.yaml:3:16: policies.per-ip.algorithm: unknown algorithm "foo" (want token_bucket, leaky_bucket, fixed_window, sliding_window_log or sliding_window_counter)`},
	// A typo is named with the field it likely stands for.
	{"bad_unknown_field.yaml", `testdata/bad_unknown_field.yaml:3:1: bogus: unknown field
testdata/bad_unknown_field.yaml:7:31: routes[0].match.method: unknown field (did you mean methods?)
testdata/bad_unknown_field.yaml:9:1: polices: unknown field (did you mean policies?)
testdata/bad_unknown_field.yaml:12:5: policies.per-key.limit: required
testdata/bad_unknown_field.yaml:12:5: policies.per-key.window: required
testdata/bad_unknown_field.yaml:13:5: policies.per-key.limt: unknown field (did you mean limit?)
testdata/bad_unknown_field.yaml:14:5: policies.per-key.Window: unknown field (did you mean window?)`},
	{"bad_unknown_policy.yaml", `testdata/bad_unknown_policy.yaml:6:22: routes[0].limits[1]: unknown policy "per-key"
testdata/bad_unknown_policy.yaml:6:31: routes[0].limits[2]: unknown policy "per_ip" (did you mean per-ip?)`},
	// With no trusted_proxies, every peer is untrusted and the fields it
	// could name its client by are removed from each request: a key on
	// one would put every client in one bucket, a match on one never
	// matches.
	{"bad_untrusted_field.yaml", `testdata/bad_untrusted_field.yaml:6:11: policies.per-client.key[0]: key source "header:CF-Connecting-IP": CF-Connecting-IP is removed from the requests of peers outside trusted_proxies, and it lists none, so its value would always be empty: list the proxies that set it in trusted_proxies, or key on ip
testdata/bad_untrusted_field.yaml:9:23: routes[0].match.headers.X-Forwarded-Proto: X-Forwarded-Proto is removed from the requests of peers outside trusted_proxies, and it lists none, so no route may match on it
testdata/bad_untrusted_field.yaml:11:80: routes[0].limits[1].key[0]: key source "header:x-real-ip": x-real-ip is removed from the requests of peers outside trusted_proxies, and it lists none, so its value would always be empty: list the proxies that set it in trusted_proxies, or key on ip`},
	{"bad_unset_env.yaml", `testdata/bad_unset_env.yaml:4:15: store.redis.password: environment variable REDIS_PASSWORD is not set
testdata/bad_unset_env.yaml:6:17: store.redis.addresses[0]: environment variable REDIS_HOST is not set
testdata/bad_unset_env.yaml:6:17: store.redis.addresses[0]: environment variable REDIS_PORT is not set
testdata/bad_unset_env.yaml:10:19: routes[0].strip_prefix: unterminated ${ in "${PREFIX"`},
	{"bad_upstream_url.yaml", `testdata/bad_upstream_url.yaml:3:15: routes[0].upstream: invalid upstream URL "ftp://127.0.0.1:9000": scheme must be http or https
testdata/bad_upstream_url.yaml:5:40: routes[1].upstreams[1]: invalid upstream URL "http://": no host
testdata/bad_upstream_url.yaml:7:17: routes[2].upstreams[0]: invalid upstream URL "http://127.0.0.1:99999": want a port from 1 to 65535
testdata/bad_upstream_url.yaml:7:43: routes[2].upstreams[1]: invalid upstream URL "http://127.0.0.1:0": want a port from 1 to 65535
testdata/bad_upstream_url.yaml:7:65: routes[2].upstreams[2]: invalid upstream URL "http://:9002": no host
testdata/bad_upstream_url.yaml:9:17: routes[3].upstreams[0]: invalid upstream URL "127.0.0.1:9000": no scheme: want http:// or https:// before the host, like http://127.0.0.1:9000
testdata/bad_upstream_url.yaml:9:33: routes[3].upstreams[1]: invalid upstream URL "localhost:9000": no scheme: want http:// or https:// before the host, like http://127.0.0.1:9000
testdata/bad_upstream_url.yaml:9:49: routes[3].upstreams[2]: invalid upstream URL "http://[::1:9000": missing ']' in host`},
	{"bad_spans.yaml", `testdata/bad_spans.yaml:6:12: policies.daily-shaping.queue: queue x interval (200000 x 24h0m0s) must be at most 100 years: set a max_wait, or a smaller queue
testdata/bad_spans.yaml:12:12: policies.yearly.burst: burst x interval (3000 x 876h0m0s) must be at most 100 years: the bucket could not be counted
testdata/bad_spans.yaml:16:12: policies.too-fast.limit: the interval window / limit is 500ns, not a whole number of microseconds; rounded up to 1µs it would admit 50% fewer requests than 2000000 per 1s (at most 0.1% is allowed)
testdata/bad_spans.yaml:24:15: policies.no-wait.max_wait: must be > 0; leave it out for the default, queue x interval, or set queue: 0 to reject whatever cannot leave at once
testdata/bad_spans.yaml:30:12: policies.no-burst.burst: must be > 0; leave it out for the default, limit
testdata/bad_spans.yaml:36:12: policies.lockout.block: must be at most 100 years (876000h0m0s)
testdata/bad_spans.yaml:45:9: routes[0].limits[3]: a route has at most one leaky_bucket limit (the first is routes[0].limits[0])
testdata/bad_spans.yaml:48:54: routes[0].limits[6].window: 1.5µs is not a whole number of microseconds, which the stores count in
testdata/bad_spans.yaml:49:64: routes[0].limits[7].block: must be at most 100 years (876000h0m0s)`},
	// A zero is what an absent field compiles to, but written on an
	// algorithm that has no such field it is as wrong as any other value.
	{"bad_zero_wrong_algorithm.yaml", `testdata/bad_zero_wrong_algorithm.yaml:6:12: policies.per-ip.burst: only token_bucket has a burst
testdata/bad_zero_wrong_algorithm.yaml:12:12: policies.per-key.queue: only leaky_bucket has a queue
testdata/bad_zero_wrong_algorithm.yaml:13:15: policies.per-key.max_wait: only leaky_bucket has a max_wait
testdata/bad_zero_wrong_algorithm.yaml:17:16: policies.per-key.overrides[0].queue: only leaky_bucket has a queue
testdata/bad_zero_wrong_algorithm.yaml:25:16: policies.shaping.overrides[0].burst: only token_bucket has a burst
testdata/bad_zero_wrong_algorithm.yaml:29:103: routes[0].limits[2].burst: only token_bucket has a burst`},
	{"bad_zero_window.yaml", `testdata/bad_zero_window.yaml:7:54: routes[1].limits[0].window: must be > 0`},
}

func TestBadConfigs(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/bad_*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !slices.ContainsFunc(badConfigs, func(c struct{ file, want string }) bool { return c.file == filepath.Base(f) }) {
			t.Errorf("%s has no expected error in badConfigs", f)
		}
	}
	for _, tc := range badConfigs {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("testdata", tc.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			c, err := Parse(path, data, testEnv)
			if err == nil {
				t.Fatalf("got config %+v, want error", c)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("got error\n%s\nwant\n%s", got, tc.want)
			}
			var ps Problems
			if !errors.As(err, &ps) {
				t.Fatalf("got error type %T, want Problems", err)
			}
			if got, want := len(ps), strings.Count(tc.want, "\n")+1; got != want {
				t.Errorf("got %d problems, want %d", got, want)
			}
		})
	}
}

// TestProblemsOneLineEach: a problem is one line even when the field it
// names holds a line break or another control character, which the line
// shows escaped.
func TestProblemsOneLineEach(t *testing.T) {
	t.Parallel()
	y := "\"bo\\ngus\": 1\nroutes:\n  - name: a\n    upstream: http://127.0.0.1:9000\n    match: {headers: {\"X\\tY\": a}}\n"
	_, err := Parse("f\r.yaml", []byte(y), nil)
	want := `f\r.yaml:1:1: bo\ngus: unknown field
f\r.yaml:5:23: routes[0].match.headers.X\tY: invalid header name "X\tY"`
	if err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
}

// TestListenersApart: listeners that bind different addresses, or let
// the system pick a port, are valid side by side.
func TestListenersApart(t *testing.T) {
	t.Parallel()
	for _, y := range []string{
		"listen: \"127.0.0.1:8080\"\nadmin: \"127.0.0.2:8080\"\n",
		"listen: \"[::1]:8080\"\nadmin: \"127.0.0.1:8080\"\n",
		"listen: \"127.0.0.1:0\"\nadmin: \"127.0.0.1:0\"\n",
		"listen: \"127.0.0.1:9091\"\nadmin: \"\"\n",
		"listen: \":8080\"\nadmin: \":9091\"\ntls: {listen: \":8443\", acme: {domains: [api.example.com]}}\n",
	} {
		if _, err := Parse("f.yaml", []byte(y), nil); err != nil {
			t.Errorf("%q: got %v, want no error", y, err)
		}
	}
}

// TestSyncLease checks that sync: lease compiles into Policy.Sync, on a
// named and an inline policy and on their overrides, and that sync:
// request and no sync are per-request.
func TestSyncLease(t *testing.T) {
	t.Parallel()
	const cfg = `store: {type: redis}
policies:
  leased: {algorithm: token_bucket, limit: 100, window: 1s, key: [ip], sync: lease, overrides: [{keys: [192.0.2.1], limit: 200}]}
  explicit: {algorithm: fixed_window, limit: 10, window: 1s, key: [ip], sync: request}
  plain: {algorithm: fixed_window, limit: 10, window: 1s, key: [ip]}
routes:
  - name: r
    upstream: http://127.0.0.1:9000
    limits: [leased, explicit, plain, {algorithm: sliding_window_counter, limit: 5, window: 1m, key: [ip], sync: lease}]
`
	c, err := Parse("sync.yaml", []byte(cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]ratelimit.Sync{"leased": ratelimit.SyncLease, "explicit": ratelimit.SyncPerRequest, "plain": ratelimit.SyncPerRequest, "r#4": ratelimit.SyncLease} {
		if got := c.Policies[name].Sync; got != want {
			t.Errorf("%s: got sync %v, want %v", name, got, want)
		}
	}
	if o := c.Overrides["leased"].ForKey("192.0.2.1"); o == nil || o.Policy.Sync != ratelimit.SyncLease {
		t.Errorf("override of a leased policy: got %+v, want it leased too", o)
	}
}

// TestDurationMessages: a duration Go cannot read is explained as what
// it is, a day unit or a number too large, not as lacking a unit.
func TestDurationMessages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"15", `f.yaml:1:19: shutdown_timeout: invalid duration "15" (want a number and a unit, like 500ms, 1m or 1h)`},
		{"10x", `f.yaml:1:19: shutdown_timeout: invalid duration "10x" (want a number and a unit, like 500ms, 1m or 1h)`},
		{"1d", `f.yaml:1:19: shutdown_timeout: invalid duration "1d" (want a number and a unit, like 500ms, 1m or 1h; a day is 24h)`},
		{"2w", `f.yaml:1:19: shutdown_timeout: invalid duration "2w" (want a number and a unit, like 500ms, 1m or 1h; a week is 168h)`},
		{"9999999999h", `f.yaml:1:19: shutdown_timeout: invalid duration "9999999999h": too long (at most 2562047h47m16.854775807s)`},
		{"1h9223372036854775807ns", `f.yaml:1:19: shutdown_timeout: invalid duration "1h9223372036854775807ns": too long (at most 2562047h47m16.854775807s)`},
	} {
		_, err := Parse("f.yaml", []byte("shutdown_timeout: "+tc.in+"\n"), nil)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v, want %s", tc.in, err, tc.want)
		}
	}
}

// TestTimeouts checks the defaults of the connection timeouts, that each
// may be set, and that none may be zero.
func TestTimeouts(t *testing.T) {
	t.Parallel()
	const route = "routes: [{name: r, upstream: \"http://127.0.0.1:9000\"}]\n"
	c, err := Parse("defaults.yaml", []byte(route), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := []time.Duration{c.ShutdownTimeout, c.ClientHeaderTimeout, c.ClientBodyTimeout, c.KeepaliveTimeout, c.SendTimeout, c.WebSocketIdleTimeout}
	if fmt.Sprint(got) != "[15s 10s 30s 2m0s 1m0s 1m0s]" {
		t.Errorf("defaults: got %v", got)
	}
	c, err = Parse("set.yaml", []byte("websocket_idle_timeout: 1h\n"+route), nil)
	if err != nil || c.WebSocketIdleTimeout != time.Hour {
		t.Errorf("websocket_idle_timeout: 1h: got %v, %v", c, err)
	}
	_, err = Parse("zero.yaml", []byte("websocket_idle_timeout: 0s\n"+route), nil)
	if err == nil || !strings.Contains(err.Error(), "zero.yaml:1:25: websocket_idle_timeout:") {
		t.Errorf("websocket_idle_timeout: 0s: got %v, want an error naming the field", err)
	}
}

// TestSyntaxErrorLines: a YAML syntax error names the line where the
// problem is, and where the list or map it breaks starts.
func TestSyntaxErrorLines(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"listen: x\nroutes: []\nrouters: [a, b\n", "f.yaml:3:1: syntax error: did not find expected ',' or ']'"},
		{"a: 1\nb: 2\nc: 3\nd: [10s\n", "f.yaml:4:1: syntax error: did not find expected ',' or ']'"},
		{"a:\n  b: 1\n c: 2\n", "f.yaml:3:1: syntax error: did not find expected key"},
		{"- a\n- b\nc: 1\n", "f.yaml:3:1: syntax error: did not find expected '-' indicator"},
		{"a: 1\nb:\n  - x\n  y: 2\n", "f.yaml:4:1: syntax error: did not find expected '-' indicator (check this line's indentation: the list it breaks starts at line 3)"},
		{"a:\n  b:\n    c: 1\n    d: 2\n   e: 3\n", "f.yaml:5:1: syntax error: did not find expected key (check this line's indentation: the mapping it breaks starts at line 2)"},
		// No line break at the end; the first line of a document after
		// another.
		{"a: 1\n---\nb:\n  c: 1\n d: 2", "f.yaml:5:1: syntax error: did not find expected key (check this line's indentation: the mapping it breaks starts at line 3)"},
		// The scanner's riddle for a ": " where no key may start gets
		// its likely cause, when the line shows one plainly.
		{"a:\n    b: x: y\n", `f.yaml:2:1: syntax error: mapping values are not allowed in this context (a value that holds ": " must be quoted)`},
		{"a:\n  b: 1\n\n    c: 2\n", "f.yaml:4:1: syntax error: mapping values are not allowed in this context (this line is indented deeper than line 2, whose value is already given: check its indentation)"},
		// After a comment the value cannot go on: the line breaks the
		// mapping instead.
		{"a:\n  b: 1 # c\n    c: 2\n", "f.yaml:3:1: syntax error: did not find expected key (check this line's indentation: the mapping it breaks starts at line 2)"},
		{"a:\n  - ip\n    b: 1\n", "f.yaml:3:1: syntax error: mapping values are not allowed in this context"},
		// Scanner errors were numbered right already.
		{"a: 1\n\tb: 2\n", "f.yaml:2:1: syntax error: found a tab character that violates indentation"},
		{"a: 1\n\tb: 2\nc:\n\td: 3\n", "f.yaml:2:1: syntax error: found a tab character that violates indentation"},
		// That one names the line where the value before the tab
		// starts: the line of the tab is the place.
		{"policies:\n  p:\n    window: 1s\n\tkey: [ip]\n", "f.yaml:4:1: syntax error: found a tab character that violates indentation"},
		{"policies:\n  p:\n    window: 1s\n  \n  \t\n\tkey: [ip]\n", "f.yaml:5:1: syntax error: found a tab character that violates indentation"},
		// A line indented with a tab gets the parser's riddle and what
		// it means.
		{"store:\n\ttype: memory\n", "f.yaml:2:1: syntax error: found character that cannot start any token (a tab indents this line: YAML indents with spaces only)"},
		{"store:\n  memory:\n  \tmax_keys: 5\n", "f.yaml:3:1: syntax error: found character that cannot start any token (a tab indents this line: YAML indents with spaces only)"},
		{"a: 1\nb: `x`\n", "f.yaml:2:1: syntax error: found character that cannot start any token"},
		{"\tlisten: x\n", "f.yaml:1:1: syntax error: found character that cannot start any token (a tab indents this line: YAML indents with spaces only)"},
		// The parser reads YAML 1.1 and refuses a document that says it
		// is 1.2, the current version, which is what a user writes.
		{"# c\n%YAML 1.2\n---\nlisten: x\n", "f.yaml:2:1: syntax error: found incompatible YAML document (%YAML 1.2: only 1.1 is read; leave the %YAML line out)"},
		{"\ufeff%YAML 1.2\n---\nlisten: x\n", "f.yaml:1:1: syntax error: found incompatible YAML document (%YAML 1.2: only 1.1 is read; leave the %YAML line out)"},
		// In a flow the tab is allowed: the backquote is the problem.
		{"a: [\n\t`x`]\n", "f.yaml:2:1: syntax error: found character that cannot start any token"},
		{"a: 1\nb: \"open\n", "f.yaml:2:1: syntax error: found unexpected end of stream"},
		// The parser names no line for an alias of an unknown anchor: the
		// first alias of that name is the place.
		{"listen: x\nadmin: \"a *nope\"\nroutes: [*nope]\n", "f.yaml:3:1: syntax error: unknown anchor 'nope' referenced"},
		{"a: &n 1\nb:\n  <<: *no\n", "f.yaml:3:1: syntax error: unknown anchor 'no' referenced"},
		{"a: it's # *no\nb: [*no]\n", "f.yaml:2:1: syntax error: unknown anchor 'no' referenced"},
		// Nor for a problem on the first line, where the message lost
		// its "yaml: " prefix only when a line was named.
		{"store: {redis: {password: ${P}}}\n", "f.yaml:1:1: syntax error: did not find expected ',' or '}'"},
		// Nor for a character the reader refuses: the line is that of
		// the first such character, line breaks counted as YAML does.
		{"listen: x\nadmin: \xff\n", "f.yaml:2:1: syntax error: invalid leading UTF-8 octet"},
		{"listen: x\n\n\nadmin: \"a\x01\"\n", "f.yaml:4:1: syntax error: control characters are not allowed"},
		{"\ufefflisten: x\r\nadmin: x\r\n# caf\u00e9 \x7f\n", "f.yaml:3:1: syntax error: control characters are not allowed"},
		{"a: 1\rb: \"\xed\xa0\x80\"\n", "f.yaml:2:1: syntax error: invalid Unicode character"},
		{"a: \"x\xc3\"\n", "f.yaml:1:1: syntax error: invalid trailing UTF-8 octet"},
	} {
		_, err := Parse("f.yaml", []byte(tc.yaml), nil)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: got %v, want %s", tc.yaml, err, tc.want)
		}
	}
}

// TestLoadAdmin: the admin address is read as Load reads it, whatever
// else the file holds.
func TestLoadAdmin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, want, wantErr string
	}{
		{"absent", "routes: []\n", "127.0.0.1:9091", ""},
		{"null", "admin:\nroutes: []\n", "127.0.0.1:9091", ""},
		{"off", "admin: \"\"\n", "", ""},
		{"set", "admin: \":9191\"\n", ":9191", ""},
		{"invalid elsewhere", "admin: \":9191\"\nbogus: 1\nroutes: [{}]\n---\nx: 1\n", ":9191", ""},
		{"empty file", "", "127.0.0.1:9091", ""},
		{"a duplicate field elsewhere", "admin: \":9191\"\nroutes: []\nroutes: []\n", ":9191", ""},
		{"a bad merge elsewhere", "admin: \":9191\"\n<<: [1]\n", ":9191", ""},
		{"a list", "admin: [a]\n", "", "admin.yaml:1:8: admin: must be a single value"},
		{"not a mapping", "- a\n", "", "admin.yaml:1:1"},
		{"broken", "admin: [\n", "", "admin.yaml:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "admin.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := LoadAdmin(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestNearestField: a suggestion is close enough to be the intended
// field, and none is made for a name merely short.
func TestNearestField(t *testing.T) {
	t.Parallel()
	known := []string{"algorithm", "limit", "window", "burst", "queue", "max_wait", "key", "shadow", "methods", "path_prefix"}
	for _, tc := range []struct{ name, want string }{
		{"limt", " (did you mean limit?)"},
		{"Limit", " (did you mean limit?)"},
		{"burts", " (did you mean burst?)"},
		{"keys", " (did you mean key?)"},
		{"method", " (did you mean methods?)"},
		{"path_prefx", " (did you mean path_prefix?)"},
		{"maxwait", " (did you mean max_wait?)"},
		{"algoritm", " (did you mean algorithm?)"},
		{"windw", " (did you mean window?)"},
		{"rate", ""}, // no field one edit away
		{"ky", " (did you mean key?)"},
		{"db", ""},
		{"bogus", ""},
	} {
		if got := nearestField(tc.name, known); got != tc.want {
			t.Errorf("nearestField(%q): got %q, want %q", tc.name, got, tc.want)
		}
	}
}
