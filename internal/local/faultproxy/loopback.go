package faultproxy

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Loopback is an HTTP server on a free 127.0.0.1 port that forwards requests to one target,
// bodies byte for byte: the part of a reverse proxy that does not decide anything. Proxy is one;
// the demo's DynamoDB capacity meter is another.
type Loopback struct {
	target    *url.URL
	ln        net.Listener
	srv       *http.Server
	transport *http.Transport
	done      chan struct{}
}

// ListenLoopback listens on 127.0.0.1 (a free port) for a proxy to target, an http(s) base URL
// such as the emulator endpoint "http://127.0.0.1:4569". Nothing is served before Serve.
func ListenLoopback(target string) (*Loopback, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("faultproxy: target %q is not an http(s) URL", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	return &Loopback{
		target: u,
		ln:     ln,
		transport: &http.Transport{
			Proxy:               nil, // the target is local; never route through an HTTP proxy
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			// Forward bodies byte for byte: DynamoDB responses carry an X-Amz-Crc32 of the body
			// as sent, which transparent decompression would invalidate.
			DisableCompression: true,
		},
		done: make(chan struct{}),
	}, nil
}

// Serve starts serving h in the background; call it once.
func (l *Loopback) Serve(h http.Handler) {
	l.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(l.done)
		_ = l.srv.Serve(l.ln) // returns http.ErrServerClosed after Close
	}()
}

// URL is the server's base URL, to be used as the SDK client's BaseEndpoint.
func (l *Loopback) URL() string { return "http://" + l.ln.Addr().String() }

// Close stops the server (after Serve) and closes every connection it holds; call it once.
func (l *Loopback) Close() error {
	var err error
	if l.srv != nil {
		err = l.srv.Close()
		<-l.done
	} else {
		err = l.ln.Close()
	}
	l.transport.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("faultproxy: close: %w", err)
	}
	return nil
}

// Forward sends r, with body as its body, to the target (path appended to the target's, query
// kept, hop-by-hop headers dropped, the Host the client signed kept) and returns the target's
// response, whose body the caller closes.
func (l *Loopback) Forward(r *http.Request, body []byte) (*http.Response, error) {
	u := *l.target
	u.Path = strings.TrimSuffix(l.target.Path, "/") + r.URL.Path
	u.RawPath = ""
	u.RawQuery = r.URL.RawQuery
	out, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		if !hopByHop(k) {
			out.Header[k] = vs
		}
	}
	// Keep the Host the client signed (SigV4 covers it) and that emulators build URLs from.
	out.Host = r.Host
	out.ContentLength = int64(len(body))
	return l.transport.RoundTrip(out)
}
