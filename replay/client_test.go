package replay

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A server that takes the connection and never answers fails the attempt within the connect
// timeout, with that reason, as a retryable error.
func TestConnectTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held []net.Conn // kept open, silent
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	defer func() {
		ln.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	}()
	to := Timeouts{Connect: 100 * time.Millisecond}
	hc := &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: to.Connect}}
	_, err = complete(context.Background(), hc, "http://"+ln.Addr().String(), "", request{Model: "m", Prompt: []int{1000}, MaxTokens: 1}, to)
	require.Error(t, err)
	assert.True(t, isRetryable(err), "%v is retryable", err)
	assert.NotContains(t, err.Error(), "retryable", "the internal mark does not show")
	assert.Contains(t, err.Error(), "connect_timeout")
}
