package redisstore

import (
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// Key builds the Redis key of a bucket:
//
//	{prefix}{{policy}|{key}}:{settings hash}
//
// The braces make policy|key the cluster hash tag, so every key of one
// bucket (a sliding log also has Key+":s") sits in one slot while different
// buckets spread over the cluster. Redis ends a tag at the first "}", so
// inside the tag "%" is written "%25" and "}" is written "%7D": a key value
// chosen by a client cannot cut the tag short and pile every bucket into
// one slot, and the escaping keeps distinct keys distinct. The hash covers
// the policy's Settings (Sync only when it is a lease, so per-request keys
// keep the hash they had) and the length of its name: a policy whose
// settings change on reload starts from fresh state instead of misreading
// the old one, and names that contain "|" cannot collide.
func Key(prefix string, r ratelimit.Request) string {
	h := fnv.New32a()
	st := r.Policy.Settings()
	var buf [8 * 8]byte
	b := buf[:0]
	for _, v := range [...]int64{int64(len(r.Policy.Name)), int64(st.Algorithm), st.Limit, int64(st.Window), st.Burst, st.Queue, int64(st.MaxWait)} {
		b = strconv.AppendInt(b, v, 36)
		b = append(b, ',')
	}
	if st.Sync != ratelimit.SyncPerRequest {
		// Leased state is laid out differently; per-request keys keep
		// the hash they always had.
		b = strconv.AppendInt(b, int64(st.Sync), 36)
		b = append(b, ',')
	}
	h.Write(b)
	var sb strings.Builder
	sb.Grow(len(prefix) + len(r.Policy.Name) + len(r.Key) + 12)
	sb.WriteString(prefix)
	sb.WriteByte('{')
	writeTagged(&sb, r.Policy.Name)
	sb.WriteByte('|')
	writeTagged(&sb, r.Key)
	sb.WriteString("}:")
	var hb [8]byte
	sb.Write(strconv.AppendUint(hb[:0], uint64(h.Sum32()), 36))
	return sb.String()
}

// writeTagged writes s for the inside of a hash tag, escaping "%" and "}".
func writeTagged(sb *strings.Builder, s string) {
	for {
		i := strings.IndexAny(s, "%}")
		if i < 0 {
			sb.WriteString(s)
			return
		}
		sb.WriteString(s[:i])
		if s[i] == '%' {
			sb.WriteString("%25")
		} else {
			sb.WriteString("%7D")
		}
		s = s[i+1:]
	}
}

// micros is d in whole microseconds. Every duration a compiled policy
// holds is one (ratelimit.NewPolicy rounds the interval up and the
// tolerance down to whole microseconds, and rejects other windows), so the
// scripts work with the very numbers the memory store does.
func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// appendParams appends the eleven script arguments that describe limit r
// (see decide.lua); undo is "-" to keep the limit's budget, else what to
// give back: the window start the decision reported, or "1". hold says
// whether the limit's units may be settled (and a token_bucket's are
// held): for a decision the policy's Hold, for a refund or keep whether
// the unit was held. gen is "-", or for a refund or keep the generation
// the decision's reply named.
func appendParams(args []string, r ratelimit.Request, undo string, hold bool, gen string) []string {
	p := r.Policy
	shadow := "0"
	if p.Shadow {
		shadow = "1"
	}
	held := "0"
	if hold {
		held = "1"
	}
	return append(args,
		strconv.Itoa(int(p.Algorithm)),
		strconv.FormatInt(p.Limit, 10),
		strconv.FormatInt(micros(p.Window), 10),
		strconv.FormatInt(micros(p.Interval()), 10),
		strconv.FormatInt(p.Burst, 10),
		strconv.FormatInt(micros(p.Tolerance()), 10),
		shadow, undo,
		strconv.FormatInt(micros(p.Block), 10),
		held, gen,
	)
}
