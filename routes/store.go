package routes

import (
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

func (d *decoder) store(n *yaml.Node, path string) Store {
	m := d.fields(n, path, "type", "memory", "redis")
	s := Store{Type: d.str(m, "type", path).or("memory")}
	if s.Type != "memory" && s.Type != "redis" {
		d.errorf(m["type"].val, field(path, "type"), "unknown store type %q (want memory or redis)", s.Type)
	}
	mp := field(path, "memory")
	mm := d.fields(m["memory"].val, mp, "max_keys")
	maxKeys := d.integer(mm, "max_keys", mp)
	if maxKeys.set && maxKeys.v <= 0 {
		d.errorf(maxKeys.n, field(mp, "max_keys"), "must be > 0")
	}
	s.Memory.MaxKeys = int(maxKeys.or(1_000_000))
	s.Redis = d.redis(m["redis"].val, field(path, "redis"))
	return s
}

func (d *decoder) redis(n *yaml.Node, path string) Redis {
	m := d.fields(n, path, "mode", "addresses", "master_name", "username", "password", "db", "key_prefix", "timeout", "on_error")
	r := Redis{
		Mode:       d.str(m, "mode", path).or("standalone"),
		MasterName: d.str(m, "master_name", path).or(""),
		Username:   d.str(m, "username", path).or(""),
		Password:   d.str(m, "password", path).or(""),
		KeyPrefix:  d.str(m, "key_prefix", path).or("sluice:"),
		Timeout:    d.positive(d.duration(m, "timeout", path), field(path, "timeout")).or(50 * time.Millisecond),
		OnError:    d.str(m, "on_error", path).or("local"),
	}
	if strings.ContainsAny(r.KeyPrefix, "{}") {
		// A brace in the prefix would become every key's cluster hash
		// tag and put all buckets in one slot.
		d.errorf(m["key_prefix"].val, field(path, "key_prefix"), "must not contain { or }")
	}
	switch r.Mode {
	case "standalone", "cluster":
	case "sentinel":
		if r.MasterName == "" {
			d.errorf(orNode(m["master_name"].val, orNode(m["mode"].val, n)), field(path, "master_name"), "required in sentinel mode")
		}
	default:
		d.errorf(m["mode"].val, field(path, "mode"), "unknown mode %q (want standalone, cluster or sentinel)", r.Mode)
	}
	switch r.OnError {
	case "local", "allow", "deny":
	default:
		d.errorf(m["on_error"].val, field(path, "on_error"), "unknown on_error %q (want local, allow or deny)", r.OnError)
	}
	addrs := d.strs(m, "addresses", path)
	for i, a := range addrs.v {
		if a.set && d.address(a, index(field(path, "addresses"), i)).set {
			r.Addresses = append(r.Addresses, a.v)
		}
	}
	if addrs.set && len(addrs.v) == 0 {
		d.errorf(addrs.n, field(path, "addresses"), "must list at least one address")
	}
	if !addrs.set {
		r.Addresses = []string{"127.0.0.1:6379"}
	}
	db := d.integer(m, "db", path)
	switch {
	case db.v < 0:
		d.errorf(db.n, field(path, "db"), "must be >= 0")
	case db.v != 0 && r.Mode == "cluster":
		d.errorf(db.n, field(path, "db"), "must be 0 in cluster mode")
	}
	r.DB = int(db.v)
	return r
}
