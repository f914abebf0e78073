package routes

import "strings"

// forwardingFields are the fields a client could use to tell the upstream
// another story than the request line and the peer (its address, scheme,
// host, prefix, path or method). The gateway removes them from the
// requests of a peer outside trusted_proxies before matching;
// "X-Forwarded-" covers every field of that prefix.
var forwardingFields = []string{
	"Forwarded",
	"X-Real-Ip",
	"True-Client-Ip",
	"X-Original-Url",
	"X-Rewrite-Url",
	"X-Http-Method-Override",
	"X-Method-Override",
	// Beyond SPEC's list: the other fields upstream libraries take the
	// client's address from (Node's request-ip reads X-Client-IP before
	// X-Forwarded-For; Django's ipware reads Client-IP, X-Forwarded and
	// Forwarded-For), so that an upstream's own limits, logs and
	// allow-lists see the client sluice keyed, not one the client named.
	"X-Forwarded",
	"Forwarded-For",
	"X-Client-Ip",
	"Client-Ip",
	"X-Cluster-Client-Ip",
	"Cf-Connecting-Ip",
	"Cf-Connecting-Ipv6",
	"Cf-Pseudo-Ipv4",
	"Fastly-Client-Ip",
	"X-Appengine-User-Ip",
}

// ForwardingField reports whether the field called name, in any letter
// case, is one the gateway removes from the requests of a peer outside
// trusted_proxies (see forwardingFields). It allocates nothing.
func ForwardingField(name string) bool {
	if name == "" {
		return false
	}
	switch name[0] {
	case 'C', 'c', 'F', 'f', 'T', 't', 'X', 'x':
	default:
		return false
	}
	if len(name) > len("X-Forwarded-") && strings.EqualFold(name[:len("X-Forwarded-")], "X-Forwarded-") {
		return true
	}
	for _, u := range forwardingFields {
		if len(u) == len(name) && strings.EqualFold(name, u) {
			return true
		}
	}
	return false
}

// untrustedOnly says why a field that ForwardingField names is never in
// a request when trusted_proxies lists no peer.
func untrustedOnly(name string) string {
	return name + " is removed from the requests of peers outside trusted_proxies, and it lists none"
}
