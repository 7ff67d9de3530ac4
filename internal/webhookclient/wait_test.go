package webhookclient_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gendurable/gendurable/internal/webhookclient"
)

// TestMain runs this binary as a server that reads requests and never answers, when
// asked to, so that the stacks measured are the client's alone.
func TestMain(m *testing.M) {
	if os.Getenv("WEBHOOKCLIENT_SILENT_SERVER") == "1" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(ln.Addr().String())
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(0)
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}
	os.Exit(m.Run())
}

// An exchange waiting for its answer on a plain TCP connection holds no read buffer:
// its connection takes one when the answer arrives (a dispatcher holds one waiting
// exchange per step in flight). Measured: 4 251 bytes of heap a waiting exchange with a
// buffer from the dial, 2 144 without.
func TestWaitingExchangesHoldNoReadBuffer(t *testing.T) {
	const n = 500
	server := exec.Command(os.Args[0], "-test.run=^$")
	server.Env = append(os.Environ(), "WEBHOOKCLIENT_SILENT_SERVER=1")
	out, err := server.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Process.Kill(); _ = server.Wait() })
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.HasPrefix(addr, "error") {
		t.Fatalf("the silent server: %q %v", addr, err)
	}
	url := "http://" + strings.TrimSpace(addr) + "/"
	c := webhookclient.New(webhookclient.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent, done sync.WaitGroup
	sent.Add(n)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		done.Add(1)
		go func() {
			x := c.Send(ctx, time.Now().Add(time.Minute), url, nil, []byte("{}"), 64)
			sent.Done()
			defer done.Done()
			x.Wait()
			_, _ = x.Finish()
		}()
	}
	sent.Wait()
	// Every goroutine has sent; wait until all are parked in Wait, then collect.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		buf := make([]byte, 8<<20)
		if strings.Count(string(buf[:runtime.Stack(buf, true)]), "(*Exchange).Wait") >= n || time.Now().After(deadline) {
			break
		}
	}
	runtime.GC()
	runtime.GC()
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	cancel()
	done.Wait()
	heap := float64(during.HeapAlloc-before.HeapAlloc) / n
	stack := float64(during.StackInuse-before.StackInuse) / n
	t.Logf("per waiting exchange: %.0f bytes of heap, %.0f of stack", heap, stack)
	if heap > 3072 {
		t.Fatalf("%.0f bytes of heap a waiting exchange: it holds a read buffer (%d bytes) again?", heap, 2048)
	}
}
