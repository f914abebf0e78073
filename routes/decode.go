package routes

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/ratelimit"
)

// decoder walks a YAML node tree strictly, expanding ${NAME} in scalar
// values and collecting every problem with the position of its node. The
// standard struct decoding is not used because it loses the position of
// most mistakes and stops at the first type error.
type decoder struct {
	file  string
	env   func(string) (string, bool)
	probs Problems
	// maxKeys is store.memory.max_keys, the max_keys of a policy that
	// sets none.
	maxKeys int
	// storeType is store.type, which sync: lease needs to be redis.
	storeType string
	// merged holds the entries of each mapping a merge key brought in,
	// so that one an alias names many times is walked once: walked again
	// each time, ten aliases a level over seven levels of a 500-byte
	// file took seconds, over nine a day.
	merged map[*yaml.Node][]entry
	// tlsListen is tls.listen as written, for the check that no two
	// listeners bind one address.
	tlsListen val[string]
	// noTrusted: trusted_proxies lists no peer, so no request holds a
	// field that ForwardingField names.
	noTrusted bool
}

// entry is one key and value of a mapping.
type entry struct {
	key, val *yaml.Node
}

// val is a decoded value with the node it came from. n is nil when the field
// was absent or null; set tells a present value from the zero value.
type val[T any] struct {
	v   T
	set bool
	n   *yaml.Node
}

// or returns the value, or def when the field was absent.
func (v val[T]) or(def T) T {
	if v.set {
		return v.v
	}
	return def
}

// errorf records a problem at n, or at line 1 column 1 when n is nil.
func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	p := Problem{File: d.file, Line: 1, Col: 1, Path: path, Message: fmt.Sprintf(format, args...)}
	if n != nil {
		p.Line, p.Col = n.Line, n.Column
	}
	d.probs = append(d.probs, p)
}

func field(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// deref follows aliases to the node they stand for.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = deref(n)
	return n == nil || n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// kindName says what a node is, for "must be a mapping, not a list".
func kindName(n *yaml.Node) string {
	switch deref(n).Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return "a scalar"
}

// spacedSource says how to write a key source typed with a space after
// its colon, "header: X-API-Key", which YAML reads as a mapping; "" for
// any other node.
func spacedSource(n *yaml.Node) string {
	m := deref(n)
	if m.Kind != yaml.MappingNode || len(m.Content) != 2 || m.Content[0].Kind != yaml.ScalarNode || m.Content[1].Kind != yaml.ScalarNode {
		return ""
	}
	switch k := m.Content[0].Value; k {
	case "header", "query", "cookie", "json":
		return fmt.Sprintf(" (write %s:%s, without a space after the colon)", k, m.Content[1].Value)
	}
	return ""
}

// entries returns the pairs of mapping n in file order, merge keys (<<)
// resolved, each key appearing once. A null n is an empty mapping.
func (d *decoder) entries(n *yaml.Node, path string) []entry {
	if isNull(n) {
		return nil
	}
	m := deref(n)
	if m.Kind != yaml.MappingNode {
		d.errorf(n, path, "must be a mapping, not %s", kindName(n))
		return nil
	}
	var out, merged []entry
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merged = append(merged, d.merge(v, path)...)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "keys must be plain strings")
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k, field(path, k.Value), "duplicate field (first at line %d)", first.Line)
			continue
		}
		seen[k.Value] = k
		out = append(out, entry{k, v})
	}
	for _, e := range merged {
		if _, dup := seen[e.key.Value]; !dup {
			seen[e.key.Value] = e.key
			out = append(out, e)
		}
	}
	return out
}

// merge returns the pairs a merge key's value brings in: one mapping or a
// list of them, earlier ones taking precedence.
func (d *decoder) merge(v *yaml.Node, path string) []entry {
	v = deref(v)
	if v.Kind == yaml.SequenceNode {
		var out []entry
		for _, c := range v.Content {
			out = append(out, d.mergedEntries(c, path)...)
		}
		return out
	}
	return d.mergedEntries(v, path)
}

// mergedEntries is entries for a mapping a merge key brings in, walked
// once however many merge keys name it; a problem in it is reported once,
// at the path that reached it first.
func (d *decoder) mergedEntries(n *yaml.Node, path string) []entry {
	m := deref(n)
	if out, ok := d.merged[m]; ok {
		return out
	}
	if d.merged == nil {
		d.merged = make(map[*yaml.Node][]entry)
	}
	out := d.entries(n, path)
	d.merged[m] = out
	return out
}

// fields returns the pairs of mapping n by key, reporting every key not in
// known as an unknown field at the key's position.
func (d *decoder) fields(n *yaml.Node, path string, known ...string) map[string]entry {
	out := map[string]entry{}
	for _, e := range d.entries(n, path) {
		if !contains(known, e.key.Value) {
			d.errorf(e.key, field(path, e.key.Value), "unknown field%s", nearestField(e.key.Value, known))
			continue
		}
		out[e.key.Value] = e
	}
	return out
}

// nearestField names the known field (or policy) an unknown name is
// likely a typo of: the same in other letter case, one edit away (a
// letter added, dropped, changed, or two swapped), or two for a name of 6
// letters or more; "" when none is. The first of known wins a tie.
func nearestField(name string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if dist := editDistance(strings.ToLower(name), k); dist < bestDist && (dist <= 1 || len(name) >= 6) {
			best, bestDist = k, dist
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// editDistance is the number of single-letter insertions, deletions,
// substitutions and swaps of adjacent letters that turn a into b.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// text returns the expanded text of scalar n. ok is false when n is absent
// or null (no problem) or when n is not a scalar or its expansion failed (a
// problem is recorded).
func (d *decoder) text(n *yaml.Node, path string) (s string, ok bool) {
	if isNull(n) {
		return "", false
	}
	if deref(n).Kind != yaml.ScalarNode {
		d.errorf(n, path, "must be a single value, not %s%s", kindName(n), spacedSource(n))
		return "", false
	}
	s, err := expand(deref(n).Value, d.env)
	if err != nil {
		// One problem each: a value may name several unset variables.
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		}
		for _, e := range errs {
			d.errorf(n, path, "%v", e)
		}
		return "", false
	}
	return s, true
}

func (d *decoder) str(m map[string]entry, name, path string) val[string] {
	e := m[name]
	s, ok := d.text(e.val, field(path, name))
	if !ok {
		return val[string]{}
	}
	return val[string]{s, true, e.val}
}

func (d *decoder) integer(m map[string]entry, name, path string) val[int64] {
	e := m[name]
	s, ok := d.text(e.val, field(path, name))
	if !ok {
		return val[int64]{}
	}
	i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		d.errorf(e.val, field(path, name), "%s is out of range: whole numbers here lie from %d to %d", s, int64(math.MinInt64), int64(math.MaxInt64))
		return val[int64]{}
	}
	if err != nil {
		d.errorf(e.val, field(path, name), "must be a whole number, not %q", s)
		return val[int64]{}
	}
	return val[int64]{i, true, e.val}
}

func (d *decoder) duration(m map[string]entry, name, path string) val[time.Duration] {
	e := m[name]
	s, ok := d.text(e.val, field(path, name))
	if !ok {
		return val[time.Duration]{}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.errorf(e.val, field(path, name), "%s", durationProblem(s, err))
		return val[time.Duration]{}
	}
	return val[time.Duration]{v, true, e.val}
}

// span is a duration that ratelimit bounds by MaxSpan (window, max_wait,
// block). One too long for Go's durations is told that bound, not Go's:
// a value the message suggests must pass.
func (d *decoder) span(m map[string]entry, name, path string) val[time.Duration] {
	e := m[name]
	s, ok := d.text(e.val, field(path, name))
	if !ok {
		return val[time.Duration]{}
	}
	v, err := time.ParseDuration(s)
	switch {
	case err != nil && durationSyntax.MatchString(s) && !strings.HasPrefix(s, "-"):
		d.errorf(e.val, field(path, name), "invalid duration %q: too long (at most 100 years, %v)", s, ratelimit.MaxSpan)
	case err != nil:
		d.errorf(e.val, field(path, name), "%s", durationProblem(s, err))
	default:
		return val[time.Duration]{v, true, e.val}
	}
	return val[time.Duration]{}
}

// durationSyntax is Go's duration syntax: time.ParseDuration refuses a
// string of it only when it is too long to count.
var durationSyntax = regexp.MustCompile(`^[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$`)

// longUnits are units people write that Go's durations lack, with what
// to write instead.
var longUnits = map[string]string{"d": "a day is 24h", "day": "a day is 24h", "days": "a day is 24h", "w": "a week is 168h", "week": "a week is 168h", "weeks": "a week is 168h"}

// durationProblem says why time.ParseDuration refused s with err.
func durationProblem(s string, err error) string {
	if durationSyntax.MatchString(s) {
		return fmt.Sprintf("invalid duration %q: too long (at most %s)", s, time.Duration(math.MaxInt64))
	}
	if joined := strings.Join(strings.Fields(s), ""); joined != s {
		if _, err := time.ParseDuration(joined); err == nil {
			return fmt.Sprintf("invalid duration %q (write %s, without spaces)", s, joined)
		}
	}
	msg := fmt.Sprintf("invalid duration %q (want a number and a unit, like 500ms, 1m or 1h", s)
	var unit string
	if _, err := fmt.Sscanf(err.Error(), "time: unknown unit %q in duration", &unit); err == nil {
		if hint, ok := longUnits[unit]; ok {
			msg += "; " + hint
		}
	}
	return msg + ")"
}

func (d *decoder) boolean(m map[string]entry, name, path string) val[bool] {
	e := m[name]
	s, ok := d.text(e.val, field(path, name))
	if !ok {
		return val[bool]{}
	}
	switch s {
	case "true", "True", "TRUE":
		return val[bool]{true, true, e.val}
	case "false", "False", "FALSE":
		return val[bool]{false, true, e.val}
	}
	d.errorf(e.val, field(path, name), "must be true or false, not %q", s)
	return val[bool]{}
}

// strs decodes a list of strings. A single value is a one-element list.
func (d *decoder) strs(m map[string]entry, name, path string) val[[]val[string]] {
	e := m[name]
	path = field(path, name)
	if isNull(e.val) {
		return val[[]val[string]]{}
	}
	n := deref(e.val)
	if n.Kind == yaml.ScalarNode {
		s, ok := d.text(e.val, path)
		if !ok {
			return val[[]val[string]]{[]val[string]{{n: e.val}}, true, e.val}
		}
		return val[[]val[string]]{[]val[string]{{s, true, e.val}}, true, e.val}
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(e.val, path, "must be a list, not %s", kindName(e.val))
		return val[[]val[string]]{}
	}
	out := make([]val[string], 0, len(n.Content))
	for i, c := range n.Content {
		s, ok := d.text(c, index(path, i))
		if !ok {
			if isNull(c) {
				d.errorf(c, index(path, i), "must not be empty")
			}
			out = append(out, val[string]{n: c})
			continue
		}
		out = append(out, val[string]{s, true, c})
	}
	return val[[]val[string]]{out, true, e.val}
}

// items returns the elements of list n; a null n is an empty list.
func (d *decoder) items(n *yaml.Node, path string) []*yaml.Node {
	if isNull(n) {
		return nil
	}
	if deref(n).Kind != yaml.SequenceNode {
		d.errorf(n, path, "must be a list, not %s", kindName(n))
		return nil
	}
	return deref(n).Content
}
