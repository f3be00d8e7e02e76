// Package gguf writes tiny Llama-shaped models as GGUF v3 files, for tests that drive a real
// inference server (llama.cpp, Ollama) without downloading a model.
//
// The models are not trained, but they are not purely random either: they "count". The
// vocabulary is SentencePiece-style (tokenizer.ggml.model "llama"): <unk>, <s>, </s>, the 256
// byte tokens <0x00>..<0xFF>, "▁", "▁w" and the words "▁w0", "▁w1", ... Every prefix of a word is
// a token, so llama.cpp's SentencePiece tokenizer turns the text "w3 w4 w5" into exactly three
// tokens (plus BOS). The output row of word i+1 is the embedding of word i and the layers add
// only a small perturbation to the residual stream, so greedy decoding after word i produces
// words i+1, i+2, ... (wrapping around after the last word): a long sequence without repeats,
// which keeps Ollama's repeat limit (a generation is cut once a token repeats more than 30
// times in a row) from firing. The output rows of <unk>, BOS, EOS, the byte tokens, "▁" and
// "▁w" are zero, so EOS is never chosen and a request generates exactly as many tokens as it
// asks for.
//
// All tensors are f32. The bytes are a deterministic function of the Spec; different seeds give
// different weights (and so different file digests) but the same counting behaviour.
package gguf

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Token IDs of the special tokens and of the first word.
const (
	UnkID       = 0   // <unk>
	BOSID       = 1   // <s>
	EOSID       = 2   // </s>
	FirstByteID = 3   // <0x00>; <0xFF> is FirstByteID+255
	SpaceID     = 259 // "▁"
	WPrefixID   = 260 // "▁w"
	FirstWordID = 261 // "▁w0"
)

// Alignment is the alignment of the tensor data (general.alignment).
const Alignment = 32

// GGUF value types (gguf_type in ggml).
const (
	typeUint32  = 4
	typeInt32   = 5
	typeFloat32 = 6
	typeBool    = 7
	typeString  = 8
	typeArray   = 9
)

// Token types (llama_token_type in llama.cpp).
const (
	tokenNormal  = 1
	tokenUnknown = 2
	tokenControl = 3
	tokenByte    = 6
)

// ggmlTypeF32 is GGML_TYPE_F32.
const ggmlTypeF32 = 0

// Spec describes a model. Zero fields take the defaults shown.
type Spec struct {
	Vocab     int    // tokens in the vocabulary, special and byte tokens included (1024); at least FirstWordID+1
	Embedding int    // embedding length (128)
	Layers    int    // transformer blocks (2)
	Heads     int    // attention heads (4); must divide Embedding
	KVHeads   int    // key/value heads (2); must divide Heads
	FFN       int    // feed-forward length (384)
	Context   int    // trained context length, llama.context_length (4096)
	Seed      uint64 // seed of the random weights; different seeds give different files
	Name      string // general.name ("mosaic-counting-llama")

	// Repeat makes a model that repeats the last word of its prompt forever instead of counting
	// on: a fixture for a server's repeat limit (Ollama v0.6.5 cuts such a generation after 31
	// tokens, without a finish reason or usage).
	Repeat bool
}

// WithDefaults returns s with its zero fields set to the defaults.
func (s Spec) WithDefaults() Spec {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&s.Vocab, 1024)
	def(&s.Embedding, 128)
	def(&s.Layers, 2)
	def(&s.Heads, 4)
	def(&s.KVHeads, 2)
	def(&s.FFN, 384)
	def(&s.Context, 4096)
	if s.Name == "" {
		s.Name = "mosaic-counting-llama"
	}
	return s
}

// Validate reports whether the spec (after defaults) describes a model that can be written.
func (s Spec) Validate() error {
	s = s.WithDefaults()
	switch {
	case s.Vocab <= FirstWordID:
		return fmt.Errorf("gguf: vocabulary of %d tokens leaves no words (need more than %d)", s.Vocab, FirstWordID)
	case s.Embedding < 0 || s.Layers < 0 || s.Heads < 0 || s.KVHeads < 0 || s.FFN < 0 || s.Context < 0:
		return errors.New("gguf: negative dimension in spec")
	case s.Embedding%s.Heads != 0:
		return fmt.Errorf("gguf: %d heads do not divide embedding length %d", s.Heads, s.Embedding)
	case s.Heads%s.KVHeads != 0:
		return fmt.Errorf("gguf: %d KV heads do not divide %d heads", s.KVHeads, s.Heads)
	case (s.Embedding/s.Heads)%2 != 0:
		return fmt.Errorf("gguf: head dimension %d is odd (RoPE needs pairs)", s.Embedding/s.Heads)
	case s.Vocab > math.MaxInt32 || s.Embedding > 1<<16 || s.FFN > 1<<20 || s.Layers > 1<<10 || s.Context > math.MaxInt32:
		return errors.New("gguf: spec too large")
	}
	return nil
}

// Words returns the number of word tokens ("▁w0" .. "▁w<n-1>") in the model's vocabulary.
// Words, Next, Text and Continuation need a valid spec (see Validate).
func (s Spec) Words() int {
	return s.WithDefaults().Vocab - FirstWordID
}

// Word returns the text of word i, e.g. Word(17) == "w17". A prompt of words separated by
// single spaces tokenizes to one token per word (plus BOS).
func Word(i int) string { return "w" + strconv.Itoa(i) }

// WordID returns the token ID of word i.
func WordID(i int) int { return FirstWordID + i }

// Next returns the word the model predicts after word i: i+1, wrapping to 0 after the last
// (i itself if s.Repeat).
func (s Spec) Next(i int) int {
	if s.Repeat {
		return i
	}
	return (i + 1) % s.Words()
}

// Text returns n words separated by single spaces, starting at word first and counting up
// (wrapping around after the last word): a prompt of exactly n tokens (plus BOS).
func (s Spec) Text(first, n int) string {
	k := s.Words()
	var b strings.Builder
	for j := range n {
		if j > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(Word(((first+j)%k + k) % k))
	}
	return b.String()
}

// Continuation returns the text a model of this spec generates greedily after a prompt that ends
// with word last, n tokens long: " w<last+1> w<last+2> ..." (each token carries its leading
// space).
func (s Spec) Continuation(last, n int) string {
	var b strings.Builder
	for range n {
		last = s.Next(last)
		b.WriteByte(' ')
		b.WriteString(Word(last))
	}
	return b.String()
}

// Tokens returns the vocabulary: token texts, scores and llama.cpp token types.
func (s Spec) Tokens() (texts []string, scores []float32, types []int32) {
	s = s.WithDefaults()
	texts = make([]string, 0, s.Vocab)
	scores = make([]float32, 0, s.Vocab)
	types = make([]int32, 0, s.Vocab)
	add := func(text string, score float32, typ int32) {
		texts = append(texts, text)
		scores = append(scores, score)
		types = append(types, typ)
	}
	add("<unk>", 0, tokenUnknown)
	add("<s>", 0, tokenControl)
	add("</s>", 0, tokenControl)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 0, tokenByte)
	}
	// SentencePiece merges the adjacent pair whose merged text has the highest score first.
	// The only merges possible in "▁w123" are "▁"+"w", "▁w"+"1", "▁w1"+"2", "▁w12"+"3", but
	// scores that grow with the length make the order explicit anyway.
	add("▁", 1, tokenNormal)
	add("▁w", 2, tokenNormal)
	for i := range s.Vocab - FirstWordID {
		w := "▁" + Word(i)
		add(w, float32(len(w)), tokenNormal)
	}
	return texts, scores, types
}

// Llama returns the GGUF file of the spec.
func Llama(s Spec) ([]byte, error) {
	var buf bytes.Buffer
	if err := WriteLlama(&buf, s); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteLlama writes the GGUF v3 file of the spec (architecture llama, f32 tensors) to w.
func WriteLlama(w io.Writer, s Spec) error {
	if err := s.Validate(); err != nil {
		return err
	}
	s = s.WithDefaults()
	bw := bufio.NewWriterSize(w, 1<<16)
	e := &enc{w: bw}

	texts, scores, types := s.Tokens()
	headDim := s.Embedding / s.Heads
	kvDim := headDim * s.KVHeads

	type kv struct {
		key string
		val any
	}
	kvs := []kv{
		{"general.architecture", "llama"},
		{"general.name", s.Name},
		{"general.file_type", uint32(0)}, // ALL_F32
		{"general.alignment", uint32(Alignment)},
		{"llama.vocab_size", uint32(s.Vocab)},
		{"llama.context_length", uint32(s.Context)},
		{"llama.embedding_length", uint32(s.Embedding)},
		{"llama.block_count", uint32(s.Layers)},
		{"llama.feed_forward_length", uint32(s.FFN)},
		{"llama.attention.head_count", uint32(s.Heads)},
		{"llama.attention.head_count_kv", uint32(s.KVHeads)},
		{"llama.rope.dimension_count", uint32(headDim)},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", texts},
		{"tokenizer.ggml.scores", scores},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.unknown_token_id", uint32(UnkID)},
		{"tokenizer.ggml.bos_token_id", uint32(BOSID)},
		{"tokenizer.ggml.eos_token_id", uint32(EOSID)},
		{"tokenizer.ggml.add_bos_token", true},
		{"tokenizer.ggml.add_eos_token", false},
		{"tokenizer.ggml.add_space_prefix", true},
	}

	tensors := s.tensors(headDim, kvDim)

	// Header.
	e.bytes([]byte("GGUF"))
	e.u32(3)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, p := range kvs {
		e.str(p.key)
		if err := e.value(p.val); err != nil {
			return fmt.Errorf("gguf: key %s: %w", p.key, err)
		}
	}
	// Tensor infos; offsets are relative to the (aligned) start of the data section.
	var off uint64
	for _, t := range tensors {
		e.str(t.name)
		e.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			e.u64(uint64(d))
		}
		e.u32(ggmlTypeF32)
		e.u64(off)
		off += pad(uint64(t.elems()) * 4)
	}
	e.zeros(int(pad(e.n) - e.n))
	// Data.
	g := newGen(s)
	for _, t := range tensors {
		start := e.n
		t.fill(g, e)
		if got, want := e.n-start, uint64(t.elems())*4; got != want && e.err == nil {
			return fmt.Errorf("gguf: tensor %s: wrote %d bytes, want %d", t.name, got, want)
		}
		e.zeros(int(pad(e.n) - e.n))
	}
	if e.err != nil {
		return fmt.Errorf("gguf: write: %w", e.err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("gguf: write: %w", err)
	}
	return nil
}

func pad(n uint64) uint64 { return (n + Alignment - 1) / Alignment * Alignment }

// tensor is a tensor's name, its dimensions in GGUF order (ne0, the contiguous one, first) and
// a function that writes its elements.
type tensor struct {
	name string
	dims []int
	fill func(g *gen, e *enc)
}

func (t tensor) elems() int {
	n := 1
	for _, d := range t.dims {
		n *= d
	}
	return n
}

// Scales of the weights. Embedding rows have RMS 1; projections into the residual stream are
// small so that the hidden state after the last layer stays close to the input embedding.
const (
	residualScale = 0.02 // attn_output and ffn_down, relative to 1/sqrt(fan-in)
)

func (s Spec) tensors(headDim, kvDim int) []tensor {
	d, v, f := s.Embedding, s.Vocab, s.FFN
	ones := func(n int) func(*gen, *enc) {
		return func(_ *gen, e *enc) {
			for range n {
				e.f32(1)
			}
		}
	}
	// random writes rows×cols Gaussian weights with standard deviation scale/sqrt(cols).
	random := func(rows, cols int, scale float64) func(*gen, *enc) {
		return func(g *gen, e *enc) {
			sd := scale / math.Sqrt(float64(cols))
			for range rows * cols {
				e.f32(float32(g.r.NormFloat64() * sd))
			}
		}
	}
	ts := []tensor{
		{"token_embd.weight", []int{d, v}, func(g *gen, e *enc) {
			for id := range v {
				for _, x := range g.embedding(id) {
					e.f32(x)
				}
			}
		}},
		{"output_norm.weight", []int{d}, ones(d)},
		// The row of a word is the embedding of the word before it (of itself if s.Repeat); the
		// other rows are zero.
		{"output.weight", []int{d, v}, func(g *gen, e *enc) {
			words := v - FirstWordID
			for id := range v {
				if id < FirstWordID {
					for range d {
						e.f32(0)
					}
					continue
				}
				prev := WordID((id - FirstWordID - 1 + words) % words)
				if s.Repeat {
					prev = id
				}
				for _, x := range g.embedding(prev) {
					e.f32(x)
				}
			}
		}},
	}
	for l := range s.Layers {
		b := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			tensor{b + "attn_norm.weight", []int{d}, ones(d)},
			tensor{b + "attn_q.weight", []int{d, d}, random(d, d, 1)},
			tensor{b + "attn_k.weight", []int{d, kvDim}, random(kvDim, d, 1)},
			tensor{b + "attn_v.weight", []int{d, kvDim}, random(kvDim, d, 1)},
			tensor{b + "attn_output.weight", []int{d, d}, random(d, d, residualScale)},
			tensor{b + "ffn_norm.weight", []int{d}, ones(d)},
			tensor{b + "ffn_gate.weight", []int{d, f}, random(f, d, 1)},
			tensor{b + "ffn_up.weight", []int{d, f}, random(f, d, 1)},
			tensor{b + "ffn_down.weight", []int{f, d}, random(d, f, residualScale)},
		)
	}
	return ts
}

// gen makes the weights: the embeddings from their own seeded source (so that output.weight can
// recompute them), everything else from a sequential source.
type gen struct {
	s    Spec
	r    *rand.Rand
	embd [][]float32
}

func newGen(s Spec) *gen {
	return &gen{s: s, r: rand.New(rand.NewPCG(s.Seed, 0x6d6f73616963))} // "mosaic"
}

// embedding returns the embedding row of token id: Gaussian, scaled to RMS exactly 1.
func (g *gen) embedding(id int) []float32 {
	if g.embd == nil {
		d := g.s.Embedding
		r := rand.New(rand.NewPCG(g.s.Seed, 0x656d6264)) // "embd"
		g.embd = make([][]float32, g.s.Vocab)
		for i := range g.embd {
			row := make([]float64, d)
			var ss float64
			for j := range row {
				row[j] = r.NormFloat64()
				ss += row[j] * row[j]
			}
			k := math.Sqrt(float64(d) / ss)
			out := make([]float32, d)
			for j := range row {
				out[j] = float32(row[j] * k)
			}
			g.embd[i] = out
		}
	}
	return g.embd[id]
}

// enc writes little-endian GGUF values and counts the bytes; it keeps the first error.
type enc struct {
	w   io.Writer
	n   uint64
	err error
	b   [8]byte
}

func (e *enc) bytes(p []byte) {
	if e.err != nil {
		return
	}
	var n int
	n, e.err = e.w.Write(p)
	e.n += uint64(n)
}

func (e *enc) zeros(n int) {
	if n > 0 {
		e.bytes(make([]byte, n))
	}
}

func (e *enc) u32(v uint32)  { binary.LittleEndian.PutUint32(e.b[:4], v); e.bytes(e.b[:4]) }
func (e *enc) u64(v uint64)  { binary.LittleEndian.PutUint64(e.b[:8], v); e.bytes(e.b[:8]) }
func (e *enc) f32(v float32) { e.u32(math.Float32bits(v)) }

func (e *enc) str(s string) {
	e.u64(uint64(len(s)))
	e.bytes([]byte(s))
}

// value writes a typed KV value: its type tag, then the value.
func (e *enc) value(v any) error {
	switch v := v.(type) {
	case string:
		e.u32(typeString)
		e.str(v)
	case uint32:
		e.u32(typeUint32)
		e.u32(v)
	case float32:
		e.u32(typeFloat32)
		e.f32(v)
	case bool:
		e.u32(typeBool)
		if v {
			e.bytes([]byte{1})
		} else {
			e.bytes([]byte{0})
		}
	case []string:
		e.u32(typeArray)
		e.u32(typeString)
		e.u64(uint64(len(v)))
		for _, s := range v {
			e.str(s)
		}
	case []float32:
		e.u32(typeArray)
		e.u32(typeFloat32)
		e.u64(uint64(len(v)))
		for _, x := range v {
			e.f32(x)
		}
	case []int32:
		e.u32(typeArray)
		e.u32(typeInt32)
		e.u64(uint64(len(v)))
		for _, x := range v {
			e.u32(uint32(x))
		}
	default:
		return fmt.Errorf("unsupported value type %T", v)
	}
	return nil
}
