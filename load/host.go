package load

import (
	"context"
	"net"
	"net/url"

	"openxet/load/report"
)

// Values of Report.GeneratorSharesCPUs.
const (
	sharedYes     = report.SharedYes
	sharedNo      = report.SharedNo
	sharedUnknown = report.SharedUnknown
)

// sharesHost says whether the server at a base URL runs on this host, so
// that the load generator shares its CPUs: "yes" when every address of its
// host is loopback or one of this host's interface addresses, "no" when
// none is, "unknown" when it cannot tell (a name that does not resolve,
// addresses of both kinds, no interface list).
func sharesHost(ctx context.Context, server string) string {
	u, err := url.Parse(server)
	if err != nil {
		return sharedUnknown
	}
	host := u.Hostname()
	if host == "localhost" {
		return sharedYes
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else {
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return sharedUnknown
		}
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	own, err := net.InterfaceAddrs()
	if err != nil {
		return sharedUnknown
	}
	isOwn := func(ip net.IP) bool {
		if ip.IsLoopback() {
			return true
		}
		for _, a := range own {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
		return false
	}
	local := 0
	for _, ip := range ips {
		if isOwn(ip) {
			local++
		}
	}
	switch {
	case len(ips) > 0 && local == len(ips):
		return sharedYes
	case len(ips) > 0 && local == 0:
		return sharedNo
	}
	return sharedUnknown
}

// sharesHosts is sharesHost over every node: "yes" or "no" when all nodes
// say so, else "unknown".
func sharesHosts(ctx context.Context, servers []string) string {
	out := ""
	for _, s := range servers {
		v := sharesHost(ctx, s)
		switch {
		case out == "":
			out = v
		case out != v:
			return sharedUnknown
		}
	}
	if out == "" {
		return sharedUnknown
	}
	return out
}
