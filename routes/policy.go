package routes

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/ratelimit"
)

// policyDef is a compiled policy with its key sources, before it is bound
// to a route.
type policyDef struct {
	pol     *ratelimit.Policy
	sources []source
	text    string // the key list as written, joined by '|'
	node    *yaml.Node
	// countStatus lists the statuses that spend budget; nil: all do.
	countStatus *StatusSet
	overrides   *Overrides // nil when none

	// broken is set when the policy did not compile (pol is nil); its
	// algorithm, when it was valid, still takes part in the checks of the
	// routes that list it, so that one run reports every problem.
	broken    bool
	algorithm ratelimit.Algorithm
}

var policyFields = []string{"algorithm", "limit", "window", "burst", "queue", "max_wait", "key", "shadow", "count_status", "block", "overrides", "max_keys", "sync"}

// policies decodes the named policies. A name that failed to compile maps
// to a broken policyDef, or to nil when it is not even a mapping, so
// references to it are not reported as unknown as well.
func (d *decoder) policies(n *yaml.Node, path string) map[string]*policyDef {
	out := map[string]*policyDef{}
	for _, e := range d.entries(n, path) {
		name := e.key.Value
		p := field(path, name)
		if err := checkName(name); err != nil {
			d.errorf(e.key, p, "%v", err)
		}
		out[name] = d.policy(e.val, p, name)
	}
	return out
}

// checkName keeps policy and route names usable in header strings, metric
// labels, inline names ("ROUTE#N") and /v1/limits keys.
func checkName(s string) error {
	if s == "" {
		return errors.New("name must not be empty")
	}
	for _, c := range s {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune(`#|"\`, c) {
			return fmt.Errorf("invalid name %q: use letters, digits and punctuation other than # | \" \\", s)
		}
	}
	return nil
}

// policy decodes one policy mapping (named or inline) and compiles it with
// ratelimit.NewPolicy, placing each of its complaints on the field at fault.
func (d *decoder) policy(n *yaml.Node, path, name string) *policyDef {
	before := len(d.probs)
	m := d.fields(n, path, policyFields...)
	if deref(n) == nil || deref(n).Kind != yaml.MappingNode {
		if isNull(n) {
			d.errorf(n, path, "must be a mapping with algorithm, limit, window and key")
		}
		return nil
	}
	alg := d.str(m, "algorithm", path)
	limit := d.integer(m, "limit", path)
	window := d.span(m, "window", path)
	burst := d.integer(m, "burst", path)
	queue := d.integer(m, "queue", path)
	maxWait := d.span(m, "max_wait", path)
	shadow := d.boolean(m, "shadow", path)
	block := d.positive(d.span(m, "block", path), field(path, "block"))
	key := d.strs(m, "key", path)
	maxKeys := d.integer(m, "max_keys", path)
	sync := d.str(m, "sync", path)
	if maxKeys.set && maxKeys.v <= 0 {
		d.errorf(maxKeys.n, field(path, "max_keys"), "must be > 0")
		maxKeys = val[int64]{}
	}

	skip := map[string]bool{} // fields already reported
	for _, f := range []struct {
		name string
		set  bool
	}{{"algorithm", alg.set}, {"limit", limit.set}, {"window", window.set}} {
		if !f.set {
			skip[f.name] = true
			if isNull(m[f.name].val) {
				d.errorf(n, field(path, f.name), "required")
			}
		}
	}
	p := ratelimit.Policy{
		Name:    name,
		Limit:   limit.v,
		Window:  window.v,
		Burst:   burst.v,
		Queue:   queue.v,
		MaxWait: maxWait.v,
		Shadow:  shadow.v,
		Block:   block.v,
		MaxKeys: int(maxKeys.or(int64(d.maxKeys))),
	}
	switch {
	case !sync.set:
	case sync.v == "lease":
		p.Sync = ratelimit.SyncLease
		if d.storeType != "redis" {
			// NewPolicy's own complaints about the lease (its
			// algorithm, a block) are reported as well.
			d.errorf(sync.n, field(path, "sync"), "lease needs store.type: redis (the memory store has no instances to share with)")
		}
	case sync.v == "request":
	default:
		d.errorf(sync.n, field(path, "sync"), "unknown sync %q (want request or lease)", sync.v)
	}
	if alg.set {
		a, err := ratelimit.ParseAlgorithm(alg.v)
		if err != nil {
			d.errorf(alg.n, field(path, "algorithm"), "%v", err)
			skip["algorithm"] = true
		}
		p.Algorithm = a
	}
	if alg.set && !skip["algorithm"] {
		// NewPolicy sees only the numbers, and a zero is what an absent
		// field gives it: burst: 0 on a fixed_window would pass.
		for _, f := range onlyFor(burst.set, queue.set, maxWait.set) {
			if p.Algorithm != f.alg {
				d.errorf(m[f.name].val, field(path, f.name), "only %s has a %s", f.alg, f.name)
				skip[f.name] = true
			}
		}
	}
	nodes := map[string]*yaml.Node{
		"algorithm": alg.n, "limit": limit.n, "window": window.n,
		"burst": burst.n, "queue": queue.n, "max_wait": maxWait.n,
		"block": block.n, "sync": sync.n,
	}
	if p.Algorithm != ratelimit.LeakyBucket && !queue.set && maxWait.set {
		// NewPolicy files a lone max_wait under queue.
		nodes["queue"] = maxWait.n
	}
	// An explicit zero is not the default: burst 0 would admit nothing and
	// max_wait 0 would leave the queue unused, so both are refused rather
	// than read as "absent". A negative one gets the same answer, since 0
	// is no way out either.
	if burst.set && burst.v <= 0 && p.Algorithm == ratelimit.TokenBucket {
		d.errorf(burst.n, field(path, "burst"), "must be > 0; leave it out for the default, limit")
		skip["burst"] = true
	}
	if maxWait.set && maxWait.v <= 0 && p.Algorithm == ratelimit.LeakyBucket {
		d.errorf(maxWait.n, field(path, "max_wait"), "must be > 0; leave it out for the default, queue x interval, or set queue: 0 to reject whatever cannot leave at once")
		skip["max_wait"] = true
	}
	// A count_status policy holds its units until the answer settles
	// them (ratelimit.Policy.Hold); its overrides, made from p, do too.
	var countStatus *StatusSet
	if !skip["algorithm"] {
		countStatus = d.countStatus(m, path, p.Algorithm)
	}
	p.Hold = countStatus != nil
	pol, err := ratelimit.NewPolicy(p)
	for _, e := range unjoin(err) {
		f, msg, _ := strings.Cut(e.Error(), ": ")
		if skip[f] || skip["algorithm"] && (f == "algorithm" || strings.HasPrefix(msg, "only ")) {
			continue
		}
		if f == "queue" && nodes["queue"] == maxWait.n && maxWait.n != nil {
			f, msg = "max_wait", "only leaky_bucket has a max_wait"
		}
		d.errorf(orNode(nodes[f], n), field(path, f), "%s", msg)
	}

	def := &policyDef{pol: pol, node: n, countStatus: countStatus}
	if !skip["algorithm"] {
		def.algorithm = p.Algorithm
	}
	var written []string
	for _, s := range key.v {
		if s.set {
			written = append(written, s.v)
		}
	}
	def.overrides = d.overrides(m["overrides"].val, field(path, "overrides"), p, written, pol != nil)
	kp := field(path, "key")
	var texts []string
	for i, s := range key.v {
		if !s.set {
			continue
		}
		src, err := parseSource(s.v)
		if err != nil {
			d.errorf(s.n, index(kp, i), "%v", err)
			continue
		}
		if src.kind == srcHeader && d.noTrusted && ForwardingField(src.name) {
			d.errorf(s.n, index(kp, i), "key source %q: %s, so its value would always be empty: list the proxies that set it in trusted_proxies, or key on ip", s.v, untrustedOnly(strings.TrimPrefix(s.v, "header:")))
			continue
		}
		def.sources = append(def.sources, src)
		texts = append(texts, s.v)
	}
	if len(key.v) == 0 && (isNull(m["key"].val) || key.set) {
		d.errorf(orNode(key.n, n), kp, "must list at least one key source, like [ip] or [header:X-API-Key]")
	}
	def.text = strings.Join(texts, "|")
	def.overrides.keyOn(def.sources)
	if len(d.probs) > before || pol == nil {
		def.pol, def.broken = nil, true
	}
	return def
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// algField is a policy field that only one algorithm takes.
type algField struct {
	name string
	alg  ratelimit.Algorithm
}

// onlyFor returns those of burst, queue and max_wait that are set, each
// with the one algorithm that takes it.
func onlyFor(burst, queue, maxWait bool) []algField {
	var out []algField
	for _, f := range []struct {
		set bool
		algField
	}{
		{burst, algField{"burst", ratelimit.TokenBucket}},
		{queue, algField{"queue", ratelimit.LeakyBucket}},
		{maxWait, algField{"max_wait", ratelimit.LeakyBucket}},
	} {
		if f.set {
			out = append(out, f.algField)
		}
	}
	return out
}
