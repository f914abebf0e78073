package pebbletest

import (
	"fmt"
	"net"
	"time"

	"github.com/miekg/dns"
)

// dnsServer answers every A query with one address and every other query
// with an empty answer, so that pebble's validation authority reaches the
// test's challenge listeners whatever name is being validated.
type dnsServer struct {
	addr string
	tcp  *dns.Server
	udp  *dns.Server
}

// startDNS serves on a free loopback port, TCP (which pebble uses with a
// custom resolver) and UDP on the same port number.
func startDNS(answer net.IP) (*dnsServer, error) {
	var lastErr error
	for range 5 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("listening for dns over tcp: %w", err)
		}
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		if err != nil {
			ln.Close()
			lastErr = err
			continue // the UDP port was taken; try another number
		}
		h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			resp := new(dns.Msg)
			resp.SetReply(req)
			resp.Authoritative = true
			for _, q := range req.Question {
				if q.Qtype != dns.TypeA || q.Qclass != dns.ClassINET {
					continue
				}
				resp.Answer = append(resp.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0},
					A:   answer,
				})
			}
			_ = w.WriteMsg(resp)
		})
		s := &dnsServer{
			addr: ln.Addr().String(),
			tcp:  &dns.Server{Listener: ln, Handler: h, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second},
			udp:  &dns.Server{PacketConn: pc, Handler: h},
		}
		started := make(chan struct{}, 2)
		s.tcp.NotifyStartedFunc = func() { started <- struct{}{} }
		s.udp.NotifyStartedFunc = func() { started <- struct{}{} }
		go func() { _ = s.tcp.ActivateAndServe() }()
		go func() { _ = s.udp.ActivateAndServe() }()
		// Shutdown fails on a server that has not started yet, so wait
		// until both run before handing the server out.
		<-started
		<-started
		return s, nil
	}
	return nil, fmt.Errorf("listening for dns over udp: %w", lastErr)
}

func (s *dnsServer) close() {
	_ = s.tcp.Shutdown()
	_ = s.udp.Shutdown()
}
