// Command l4relay is the smallest TCP relay Go's standard library gives: a
// goroutine per direction copying through a 64 KiB buffer with net.Conn's
// Read and Write (the runtime's netpoller waits for readiness). bench/proxy.sh
// runs it beside HAProxy and Switchyard as a reference: what any Go proxy
// built on goroutines and the netpoller costs per relayed query before it
// does anything with the protocol.
//
// Usage: l4relay LISTEN_ADDR BACKEND_ADDR   (both host:port; loopback in the benchmark)
package main

import (
	"fmt"
	"io"
	"net"
	"os"
)

// plainWriter hides the destination's ReadFrom so that io.CopyBuffer uses
// read(2)/write(2) as an ordinary relay does, not splice(2).
type plainWriter struct{ io.Writer }

func pipe(dst, src net.Conn) {
	buf := make([]byte, 64<<10)
	_, _ = io.CopyBuffer(plainWriter{dst}, src, buf)
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: l4relay LISTEN_ADDR BACKEND_ADDR")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "l4relay:", err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "l4relay:", err)
			os.Exit(1)
		}
		go func() {
			b, err := net.Dial("tcp", os.Args[2])
			if err != nil {
				fmt.Fprintln(os.Stderr, "l4relay: backend:", err)
				_ = c.Close()
				return
			}
			done := make(chan struct{})
			go func() { pipe(b, c); close(done) }()
			pipe(c, b)
			<-done
			_ = c.Close()
			_ = b.Close()
		}()
	}
}
