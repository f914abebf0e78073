package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestEvictionNeverAdmitsBeyondModel drives a store of a tiny max_keys
// with a mix of keys coming back and new ones, with sweeps, peeks,
// decisions of two keys at once, refunds, blocks and reloads to equal
// settings and another max_keys between them, all on a virtual clock. Whatever it evicts, each key's admitted
// requests must be ones the model of SPEC §3 admits given that key's
// own admitted history: a bucket that had to go comes back no fuller
// than it left. A peek just before a decision agrees with it.
func TestEvictionNeverAdmitsBeyondModel(t *testing.T) {
	t.Parallel()
	for _, a := range Algorithms {
		for _, tc := range []struct {
			maxKeys int
			block   time.Duration
		}{{1, 0}, {2, 0}, {3, 0}, {8, 0}, {130, 0}, {1, 15 * time.Second}, {3, 15 * time.Second}} {
			maxKeys := tc.maxKeys
			t.Run(fmt.Sprintf("%v/max_keys=%d/block=%v", a, maxKeys, tc.block), func(t *testing.T) {
				t.Parallel()
				pol := Policy{Name: "ev", Algorithm: a, Limit: 3, Window: 10 * time.Second, MaxKeys: maxKeys, Block: tc.block}
				switch a {
				case LeakyBucket:
					pol.Queue = 2
				case TokenBucket:
					pol.Burst = 4
				}
				p := MustPolicy(pol)
				now := t0.UnixNano()
				m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: func() time.Time { return time.Unix(0, now) }})
				defer m.Close()
				rng := rand.New(rand.NewPCG(uint64(a), uint64(maxKeys)+uint64(tc.block)))
				models := map[string]*modelBucket{}
				model := func(key string) *modelBucket {
					if models[key] == nil {
						models[key] = &modelBucket{p: p}
					}
					return models[key]
				}
				fresh := 0
				pick := func() string {
					if rng.IntN(3) == 0 {
						fresh++
						return "new" + strconv.Itoa(fresh)
					}
					return "k" + strconv.Itoa(rng.IntN(6))
				}
				type unit struct {
					r  Request
					d  Decision
					at int64
				}
				var units []unit
				w := int64(p.Window)
				for n := range 8000 {
					switch rng.IntN(6) {
					case 0:
						now += rng.Int64N(w / 3)
					case 1:
						now = windowStart(now, w) + w + rng.Int64N(3) - 1
					case 2:
						now += int64(p.Interval()) + rng.Int64N(3) - 1
					default:
						now += rng.Int64N(int64(p.Interval()) / 4)
					}
					switch rng.IntN(20) {
					case 0:
						m.Sweep(time.Unix(0, now))
					case 1:
						// A reload to equal settings keeps every bucket,
						// whatever it does to max_keys.
						if rng.IntN(2) == 0 {
							pol.MaxKeys = []int{1, 2, 3, 8, 130}[rng.IntN(5)]
						}
						p = MustPolicy(pol)
						for _, b := range models {
							b.p = p
						}
					case 3:
						// A count_status refund of an admitted request, which
						// then never counted; token_bucket's held units are
						// settled apart, leaky_bucket's are not refunded.
						if len(units) == 0 || a == TokenBucket || a == LeakyBucket {
							break
						}
						i := len(units) - 1 - rng.IntN(min(len(units), 4)) // mostly units that still count
						u := units[i]
						units = slices.Delete(units, i, i+1)
						if err := m.Refund(context.Background(), time.Unix(0, now), []Request{u.r}, []Decision{u.d}); err != nil {
							t.Fatal(err)
						}
						b := model(u.r.Key)
						if j := slices.Index(b.accepted, u.at); j >= 0 {
							b.accepted = slices.Delete(b.accepted, j, j+1)
						}
					case 2:
						key := pick()
						d, err := m.Peek(context.Background(), time.Unix(0, now), Request{Policy: p, Key: key})
						if err != nil {
							t.Fatal(err)
						}
						if d.Remaining > 0 && !model(key).admit(now, false) && !model(key).close {
							t.Fatalf("step %d: peek of %s at +%v: got Remaining %d, want 0 (the model admits nothing)",
								n, key, time.Duration(now-t0.UnixNano()), d.Remaining)
						}
					}
					keys := []string{pick()}
					if rng.IntN(4) == 0 {
						if k := pick(); k != keys[0] {
							keys = append(keys, k)
						}
					}
					reqs := make([]Request, len(keys))
					for i, k := range keys {
						reqs[i] = Request{Policy: p, Key: k}
					}
					var peeked Decision
					if len(keys) == 1 {
						var err error
						if peeked, err = m.Peek(context.Background(), time.Unix(0, now), reqs[0]); err != nil {
							t.Fatal(err)
						}
					}
					out := make([]Decision, len(keys))
					if err := m.Decide(context.Background(), time.Unix(0, now), reqs, out); err != nil {
						t.Fatal(err)
					}
					if len(keys) == 1 && (peeked.Remaining > 0) != out[0].Allowed {
						t.Fatalf("step %d: key %s at +%v: peek said Remaining %d, then the decision got Allowed %v; peek %+v decision %+v model %v",
							n, keys[0], time.Duration(now-t0.UnixNano()), peeked.Remaining, out[0].Allowed, peeked, out[0], model(keys[0]).accepted)
					}
					admitted := true
					for i := range out {
						admitted = admitted && out[i].Allowed
					}
					if !admitted {
						continue
					}
					if len(keys) == 1 {
						units = append(units, unit{reqs[0], out[0], now})
					}
					for _, k := range keys {
						if b := model(k); !b.admit(now, true) && !b.close {
							t.Fatalf("step %d: key %s at +%v (of %v): got admitted, want rejected: the model, given the key's own admitted history, admits nothing",
								n, k, time.Duration(now-t0.UnixNano()), keys)
						}
					}
				}
			})
		}
	}
}

// TestConcurrentEvictionNeverAdmitsBeyondModel has goroutines decide on one
// key, alone or with another key in one decision, while others flood its
// policy with new keys, refund, reset, sweep and peek, at a
// few instants of a virtual clock. At each instant the key's admitted
// requests must be ones the model admits after those of the instants
// before: racing the decisions, the evictions that bring the bucket back
// from the record and the sweeper loses no request.
func TestConcurrentEvictionNeverAdmitsBeyondModel(t *testing.T) {
	t.Parallel()
	for _, a := range Algorithms {
		for _, maxKeys := range []int{1, 4} {
			t.Run(fmt.Sprintf("%v/max_keys=%d", a, maxKeys), func(t *testing.T) {
				t.Parallel()
				pol := Policy{Name: "race", Algorithm: a, Limit: 20, Window: time.Second, MaxKeys: maxKeys}
				switch a {
				case LeakyBucket:
					pol.Queue = 10
				case TokenBucket:
					pol.Burst = 30
				}
				p := MustPolicy(pol)
				var clock atomic.Int64
				m := NewMemoryStore(MemoryOptions{SweepInterval: -1, Clock: func() time.Time { return time.Unix(0, clock.Load()) }})
				defer m.Close()
				b := &modelBucket{p: p}
				w, iv := int64(p.Window), int64(p.Interval())
				start := windowStart(t0.UnixNano(), w) + w/3
				edge := windowStart(start, w) + w - start // the next window's start
				for _, at := range []int64{0, 1000, w / 2, edge - 1, edge, w, w + iv, 3 * w / 2, 3 * w} {
					now := start + at
					clock.Store(now)
					var admitted atomic.Int64
					var wg sync.WaitGroup
					stop := make(chan struct{})
					var others sync.WaitGroup
					for g := range 4 {
						others.Add(1)
						go func() {
							defer others.Done()
							out := make([]Decision, 1)
							for i := 0; ; i++ {
								select {
								case <-stop:
									return
								default:
									runtime.Gosched() // the deciders come first
								}
								switch g {
								case 0:
									m.Sweep(time.Unix(0, now))
								case 1:
									m.Peek(context.Background(), time.Unix(0, now), Request{Policy: p, Key: "victim"})
								case 2:
									// Flood keys taken, refunded and reset, whose
									// buckets move and go beside the victim's.
									r := []Request{{Policy: p, Key: fmt.Sprintf("churn-%d", i%8)}}
									m.Decide(context.Background(), time.Unix(0, now), r, out)
									if i%3 == 0 {
										m.Refund(context.Background(), time.Unix(0, now), r, out)
									} else {
										m.Reset(context.Background(), r[0])
									}
								default:
									key := fmt.Sprintf("flood-%d-%d", at, i)
									m.Decide(context.Background(), time.Unix(0, now), []Request{{Policy: p, Key: key}}, out)
								}
							}
						}()
					}
					for g := range 6 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							// Half decide the key alone, half with another
							// key of the policy, under the shards' locks.
							reqs := []Request{{Policy: p, Key: "victim"}, {Policy: p, Key: fmt.Sprintf("pair-%d-%d", at, g)}}[:1+g%2]
							out := make([]Decision, len(reqs))
							for range 40 {
								if err := m.Decide(context.Background(), time.Unix(0, now), reqs, out); err != nil {
									t.Error(err)
									return
								}
								if out[0].Allowed && out[len(out)-1].Allowed {
									admitted.Add(1)
								}
							}
						}()
					}
					wg.Wait()
					close(stop)
					others.Wait()
					for i := range admitted.Load() {
						if !b.admit(now, true) && !b.close {
							t.Fatalf("at +%v: got %d admitted, want at most %d", time.Duration(now-start), admitted.Load(), i)
						}
					}
				}
			})
		}
	}
}
