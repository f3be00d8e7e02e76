package replay

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
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

// A stream that ends early is a failed call, never a short one: Ollama 0.6.5, for one, cuts a
// generation that repeats a token 31 times and answers HTTP 200 with no finish reason, no usage
// and no [DONE]; a server may also finish early, or count fewer prompt tokens than were sent.
func TestTruncatedStreamsFail(t *testing.T) {
	token := `data: {"choices":[{"text":" w1","finish_reason":null}]}` + "\n\n"
	tests := []struct {
		name, body, want string
		retry            bool
	}{
		{"cut without finish, usage or [DONE]", strings.Repeat(token, 31),
			"the stream ended after 31 tokens without a finish reason, usage or [DONE]", true},
		{"no finish reason", strings.Repeat(token, 4) + `data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4}}` + "\n\ndata: [DONE]\n\n",
			"no finish reason", true},
		{"fewer tokens", strings.Repeat(token, 3) + `data: {"choices":[{"text":"","finish_reason":"stop"}]}` + "\n\n" +
			`data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}` + "\n\ndata: [DONE]\n\n",
			"the server produced 3 tokens, 4 were asked (finish reason \"stop\")", true},
		{"no usage", strings.Repeat(token, 3) + `data: {"choices":[{"text":" w2","finish_reason":"length"}]}` + "\n\ndata: [DONE]\n\n",
			"carried no usage", false},
		{"prompt truncated", strings.Repeat(token, 3) + `data: {"choices":[{"text":" w2","finish_reason":"length"}]}` + "\n\n" +
			`data: {"choices":[],"usage":{"prompt_tokens":2048,"completion_tokens":4}}` + "\n\ndata: [DONE]\n\n",
			"the server counted 2048 prompt tokens, 3001 were sent", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			_, err := complete(context.Background(), srv.Client(), srv.URL, "", request{Model: "m", Prompt: "w1 w2", MaxTokens: 4, promptTokens: 3001}, Timeouts{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.Equal(t, tt.retry, isRetryable(err), "%v", err)
		})
	}
	// The complete stream passes.
	good := strings.Repeat(token, 3) + `data: {"choices":[{"text":" w2","finish_reason":"length"}]}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":3001,"completion_tokens":4}}` + "\n\ndata: [DONE]\n\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, good) }))
	defer srv.Close()
	c, err := complete(context.Background(), srv.Client(), srv.URL, "", request{Model: "m", Prompt: "w1 w2", MaxTokens: 4, promptTokens: 3001}, Timeouts{})
	require.NoError(t, err)
	assert.Equal(t, 4, c.CompletionTokens)
}
