package gguf_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mosaic-sched/mosaic/internal/gguf"
)

// file is what the test's own GGUF reader makes of a file.
type file struct {
	version  uint32
	kv       map[string]any
	keys     []string // in file order
	tensors  []tensorInfo
	dataOff  int // start of the data section
	raw      []byte
	alignmnt int
}

type tensorInfo struct {
	name string
	dims []uint64
	typ  uint32
	off  uint64
}

func (f *file) tensor(t *testing.T, name string) ([]uint64, []float32) {
	t.Helper()
	for _, ti := range f.tensors {
		if ti.name == name {
			n := uint64(1)
			for _, d := range ti.dims {
				n *= d
			}
			start := f.dataOff + int(ti.off)
			out := make([]float32, n)
			for i := range out {
				out[i] = math.Float32frombits(binary.LittleEndian.Uint32(f.raw[start+4*i:]))
			}
			return ti.dims, out
		}
	}
	t.Fatalf("no tensor %s", name)
	return nil, nil
}

type reader struct {
	b   []byte
	off int
}

func (r *reader) need(n int) []byte {
	if n < 0 || r.off+n > len(r.b) {
		panic(fmt.Sprintf("read %d bytes at %d past end %d", n, r.off, len(r.b)))
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}
func (r *reader) u8() uint8   { return r.need(1)[0] }
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.need(4)) }
func (r *reader) u64() uint64 { return binary.LittleEndian.Uint64(r.need(8)) }
func (r *reader) str() string { return string(r.need(int(r.u64()))) }

func (r *reader) value(typ uint32) any {
	switch typ {
	case 0:
		return r.u8()
	case 1:
		return int8(r.u8())
	case 2:
		return binary.LittleEndian.Uint16(r.need(2))
	case 3:
		return int16(binary.LittleEndian.Uint16(r.need(2)))
	case 4:
		return r.u32()
	case 5:
		return int32(r.u32())
	case 6:
		return math.Float32frombits(r.u32())
	case 7:
		b := r.u8()
		if b > 1 {
			panic(fmt.Sprintf("bool value %d", b))
		}
		return b == 1
	case 8:
		return r.str()
	case 9:
		et := r.u32()
		n := r.u64()
		out := make([]any, n)
		for i := range out {
			out[i] = r.value(et)
		}
		return out
	case 10:
		return r.u64()
	case 11:
		return int64(r.u64())
	case 12:
		return math.Float64frombits(r.u64())
	}
	panic(fmt.Sprintf("unknown value type %d", typ))
}

// parse reads a GGUF file (v3, little-endian) and checks its layout.
func parse(t *testing.T, b []byte) *file {
	t.Helper()
	r := &reader{b: b}
	f := &file{kv: map[string]any{}, raw: b}
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("parse: %v", p)
		}
	}()
	require.Equal(t, "GGUF", string(r.need(4)), "magic")
	f.version = r.u32()
	nt, nkv := r.u64(), r.u64()
	for range nkv {
		k := r.str()
		_, dup := f.kv[k]
		require.False(t, dup, "duplicate key %s", k)
		f.kv[k] = r.value(r.u32())
		f.keys = append(f.keys, k)
	}
	for range nt {
		ti := tensorInfo{name: r.str()}
		nd := r.u32()
		for range nd {
			ti.dims = append(ti.dims, r.u64())
		}
		ti.typ = r.u32()
		ti.off = r.u64()
		f.tensors = append(f.tensors, ti)
	}
	f.alignmnt = 32
	if a, ok := f.kv["general.alignment"].(uint32); ok {
		f.alignmnt = int(a)
	}
	f.dataOff = (r.off + f.alignmnt - 1) / f.alignmnt * f.alignmnt
	require.LessOrEqual(t, f.dataOff, len(b))
	assert.Equal(t, make([]byte, f.dataOff-r.off), b[r.off:f.dataOff], "padding before data is zero")
	// Tensors are laid out in order, aligned, without overlaps, and fill the file.
	end := uint64(0)
	for _, ti := range f.tensors {
		require.Zero(t, ti.off%uint64(f.alignmnt), "tensor %s offset %d not aligned", ti.name, ti.off)
		require.GreaterOrEqual(t, ti.off, end, "tensor %s overlaps", ti.name)
		n := uint64(4)
		for _, d := range ti.dims {
			n *= d
		}
		end = ti.off + n
	}
	require.Equal(t, (end+uint64(f.alignmnt)-1)/uint64(f.alignmnt)*uint64(f.alignmnt), uint64(len(b)-f.dataOff), "data section size")
	return f
}

func TestRoundTrip(t *testing.T) {
	s := gguf.Spec{Seed: 7}
	b, err := gguf.Llama(s)
	require.NoError(t, err)
	f := parse(t, b)

	assert.Equal(t, uint32(3), f.version)
	assert.Equal(t, "llama", f.kv["general.architecture"])
	assert.Equal(t, "llama", f.kv["tokenizer.ggml.model"])
	for k, want := range map[string]uint32{
		"llama.context_length":          4096,
		"llama.embedding_length":        128,
		"llama.block_count":             2,
		"llama.feed_forward_length":     384,
		"llama.attention.head_count":    4,
		"llama.attention.head_count_kv": 2,
		"llama.rope.dimension_count":    32,
		"tokenizer.ggml.bos_token_id":   1,
		"tokenizer.ggml.eos_token_id":   2,
		"general.alignment":             32,
	} {
		assert.Equal(t, want, f.kv[k], k)
	}
	assert.Equal(t, true, f.kv["tokenizer.ggml.add_bos_token"])
	assert.IsType(t, float32(0), f.kv["llama.attention.layer_norm_rms_epsilon"])

	toks := f.kv["tokenizer.ggml.tokens"].([]any)
	require.Len(t, toks, 1024)
	assert.Len(t, f.kv["tokenizer.ggml.scores"].([]any), 1024)
	assert.Len(t, f.kv["tokenizer.ggml.token_type"].([]any), 1024)
	assert.Equal(t, []any{"<unk>", "<s>", "</s>", "<0x00>"}, toks[:4])
	assert.Equal(t, "<0xFF>", toks[258])
	assert.Equal(t, []any{"▁", "▁w", "▁w0", "▁w1"}, toks[259:263])
	assert.Equal(t, "▁w762", toks[1023])
	assert.Equal(t, 763, s.Words())
	assert.Equal(t, int32(6), f.kv["tokenizer.ggml.token_type"].([]any)[3], "byte token type")

	names := make([]string, len(f.tensors))
	for i, ti := range f.tensors {
		names[i] = ti.name
		assert.Equal(t, uint32(0), ti.typ, "%s is f32", ti.name)
	}
	for _, n := range []string{"token_embd.weight", "output_norm.weight", "output.weight",
		"blk.0.attn_q.weight", "blk.1.ffn_down.weight"} {
		assert.Contains(t, names, n)
	}
	assert.Len(t, f.tensors, 3+2*9)
	dims, _ := f.tensor(t, "blk.0.attn_k.weight")
	assert.Equal(t, []uint64{128, 64}, dims)
	dims, _ = f.tensor(t, "blk.0.ffn_down.weight")
	assert.Equal(t, []uint64{384, 128}, dims)
	dims, _ = f.tensor(t, "token_embd.weight")
	assert.Equal(t, []uint64{128, 1024}, dims)
	t.Logf("file: %d bytes, %d KV pairs, %d tensors", len(b), len(f.keys), len(f.tensors))
}

// WriteLlama streams the same bytes that Llama returns, through a writer that takes one byte
// at a time, and a failing writer's error comes back.
func TestWriter(t *testing.T) {
	s := gguf.Spec{Vocab: 300, Embedding: 16, Heads: 2, KVHeads: 1, FFN: 32, Layers: 1}
	want, err := gguf.Llama(s)
	require.NoError(t, err)
	var got bytes.Buffer
	require.NoError(t, gguf.WriteLlama(struct{ io.Writer }{oneByte{&got}}, s))
	assert.Equal(t, want, got.Bytes())

	err = gguf.WriteLlama(failAfter{n: 1000}, s)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "disk full")
}

type oneByte struct{ w io.Writer }

func (o oneByte) Write(p []byte) (int, error) {
	for i := range p {
		if _, err := o.w.Write(p[i : i+1]); err != nil {
			return i, err
		}
	}
	return len(p), nil
}

type failAfter struct{ n int }

func (f failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, fmt.Errorf("disk full")
	}
	return len(p), nil
}

func TestDeterministicAndSeeded(t *testing.T) {
	digest := func(s gguf.Spec) [32]byte {
		b, err := gguf.Llama(s)
		require.NoError(t, err)
		return sha256.Sum256(b)
	}
	a := digest(gguf.Spec{Seed: 1})
	assert.Equal(t, a, digest(gguf.Spec{Seed: 1}), "same spec, same bytes")
	assert.Equal(t, a, digest(gguf.Spec{Seed: 1, Vocab: 1024, Embedding: 128}), "explicit defaults")
	assert.NotEqual(t, a, digest(gguf.Spec{Seed: 2}), "another seed")
	assert.NotEqual(t, a, digest(gguf.Spec{Seed: 1, Layers: 3}))
	assert.NotEqual(t, a, digest(gguf.Spec{Seed: 1, Repeat: true}))
}

func TestValidate(t *testing.T) {
	for _, s := range []gguf.Spec{
		{Vocab: gguf.FirstWordID},
		{Embedding: 130},
		{Heads: 4, KVHeads: 3},
		{Embedding: 12, Heads: 4, KVHeads: 2}, // head dimension 3
		{FFN: -1},
	} {
		assert.Error(t, s.Validate(), "%+v", s)
		assert.Error(t, gguf.WriteLlama(io.Discard, s), "%+v", s)
	}
	assert.NoError(t, gguf.Spec{}.Validate())
}

func TestWords(t *testing.T) {
	s := gguf.Spec{Vocab: 300}
	assert.Equal(t, 39, s.Words())
	assert.Equal(t, "w17", gguf.Word(17))
	assert.Equal(t, gguf.FirstWordID+17, gguf.WordID(17))
	assert.Equal(t, "w37 w38 w0 w1", s.Text(37, 4))
	assert.Equal(t, " w38 w0 w1", s.Continuation(37, 3))
	assert.Equal(t, 0, s.Next(38))
}

// spmTokenize is the test's own model of a SentencePiece BPE tokenizer as llama.cpp runs it
// (tokenizer.ggml.model "llama"): a space is prepended, spaces become "▁", the text is split
// into characters, and the adjacent pair whose concatenation is a token with the highest score
// (leftmost on ties) is merged until no pair is a token; characters that are no token fall
// back to byte tokens.
func spmTokenize(text string, vocab map[string]int, scores []float32) []int {
	text = strings.ReplaceAll(" "+text, " ", "▁")
	var syms []string
	for _, r := range text {
		syms = append(syms, string(r))
	}
	for {
		best, bestScore := -1, float32(math.Inf(-1))
		for i := 0; i+1 < len(syms); i++ {
			if id, ok := vocab[syms[i]+syms[i+1]]; ok && scores[id] > bestScore {
				best, bestScore = i, scores[id]
			}
		}
		if best < 0 {
			break
		}
		syms = slices.Replace(syms, best, best+2, syms[best]+syms[best+1])
	}
	var ids []int
	for _, s := range syms {
		if id, ok := vocab[s]; ok {
			ids = append(ids, id)
			continue
		}
		for _, b := range []byte(s) {
			ids = append(ids, gguf.FirstByteID+int(b))
		}
	}
	return ids
}

// A prompt of N words is N tokens, the words' own tokens, for words of every length.
func TestTokenization(t *testing.T) {
	s := gguf.Spec{}
	texts, scores, _ := s.Tokens()
	vocab := map[string]int{}
	for id, tx := range texts {
		_, dup := vocab[tx]
		require.False(t, dup, "token %q twice", tx)
		vocab[tx] = id
	}
	// Every prefix of a word (after "▁") is a token: the property the merges rely on.
	for i := range s.Words() {
		w := []rune("▁" + gguf.Word(i))
		for k := 1; k <= len(w); k++ {
			_, ok := vocab[string(w[:k])]
			require.True(t, ok, "prefix %q of word %d", string(w[:k]), i)
		}
	}
	for _, c := range []struct{ first, n int }{{0, 1}, {0, 20}, {5, 200}, {700, 1000}, {762, 3}} {
		ids := spmTokenize(s.Text(c.first, c.n), vocab, scores)
		require.Len(t, ids, c.n)
		for j, id := range ids {
			require.Equal(t, gguf.WordID((c.first+j)%s.Words()), id)
		}
	}
	// Text that is not words falls back to bytes, as llama.cpp does.
	assert.Equal(t, []int{gguf.SpaceID, gguf.FirstByteID + 'x'}, spmTokenize("x", vocab, scores))
}

// The model counts: a forward pass (the test's own implementation of the llama architecture,
// as llama.cpp computes it) after any word puts the highest logit on the next word, by a wide
// margin, and never on a special or byte token.
func TestCounting(t *testing.T) {
	t.Run("count", func(t *testing.T) { testCounting(t, gguf.Spec{Seed: 3}) })
	t.Run("repeat", func(t *testing.T) { testCounting(t, gguf.Spec{Seed: 3, Repeat: true}) })
}

func testCounting(t *testing.T, s gguf.Spec) {
	s = s.WithDefaults()
	b, err := gguf.Llama(s)
	require.NoError(t, err)
	m := load(t, parse(t, b), s)

	// Greedy decoding from a short prompt, through the full model.
	seq := []int{gguf.BOSID}
	for j := range 8 {
		seq = append(seq, gguf.WordID(400+j))
	}
	minMargin := math.Inf(1)
	for range 40 {
		logits := m.forward(seq)
		top, margin := argmax(logits)
		last := seq[len(seq)-1] - gguf.FirstWordID
		require.Equal(t, gguf.WordID(s.Next(last)), top, "after word %d", last)
		minMargin = min(minMargin, margin)
		seq = append(seq, top)
	}
	t.Logf("greedy: 40 tokens as Next says, smallest logit margin %.1f", minMargin)
	assert.Greater(t, minMargin, 20.0)

	// Every word, as the single token after BOS (the layers barely move the residual stream).
	minMargin = math.Inf(1)
	for i := range s.Words() {
		logits := m.forward([]int{gguf.BOSID, gguf.WordID(i)})
		top, margin := argmax(logits)
		require.Equal(t, gguf.WordID(s.Next(i)), top, "after word %d", i)
		minMargin = min(minMargin, margin)
	}
	t.Logf("every word: smallest logit margin %.1f", minMargin)
	assert.Greater(t, minMargin, 20.0)
}

func argmax(x []float64) (int, float64) {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	second := math.Inf(-1)
	for i, v := range x {
		if i != best {
			second = max(second, v)
		}
	}
	return best, x[best] - second
}

// model is a llama forward pass in float64 over the tensors of a parsed file.
type model struct {
	s                gguf.Spec
	embd, out, onorm []float32
	layers           []layer
}

type layer struct {
	attnNorm, q, k, v, o, ffnNorm, gate, up, down []float32
}

func load(t *testing.T, f *file, s gguf.Spec) *model {
	get := func(name string) []float32 { _, x := f.tensor(t, name); return x }
	m := &model{s: s, embd: get("token_embd.weight"), out: get("output.weight"), onorm: get("output_norm.weight")}
	for l := range s.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		m.layers = append(m.layers, layer{
			attnNorm: get(p + "attn_norm.weight"), q: get(p + "attn_q.weight"), k: get(p + "attn_k.weight"),
			v: get(p + "attn_v.weight"), o: get(p + "attn_output.weight"), ffnNorm: get(p + "ffn_norm.weight"),
			gate: get(p + "ffn_gate.weight"), up: get(p + "ffn_up.weight"), down: get(p + "ffn_down.weight"),
		})
	}
	return m
}

// matvec computes W x for a GGUF weight of dims [len(x), rows].
func matvec(w []float32, x []float64) []float64 {
	n := len(x)
	y := make([]float64, len(w)/n)
	for r := range y {
		var acc float64
		for c, xc := range x {
			acc += float64(w[r*n+c]) * xc
		}
		y[r] = acc
	}
	return y
}

func rmsNorm(x []float64, w []float32) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	k := 1 / math.Sqrt(ss/float64(len(x))+1e-5)
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v * k * float64(w[i])
	}
	return y
}

// rope rotates consecutive pairs of each head's dimensions by pos·base^(-2i/headDim).
func rope(x []float64, headDim, pos int) {
	for h := 0; h < len(x); h += headDim {
		for i := 0; i < headDim; i += 2 {
			theta := float64(pos) * math.Pow(10000, -float64(i)/float64(headDim))
			c, sn := math.Cos(theta), math.Sin(theta)
			a, b := x[h+i], x[h+i+1]
			x[h+i], x[h+i+1] = a*c-b*sn, a*sn+b*c
		}
	}
}

// forward returns the logits after the last token of seq.
func (m *model) forward(seq []int) []float64 {
	d, hd := m.s.Embedding, m.s.Embedding/m.s.Heads
	group := m.s.Heads / m.s.KVHeads
	hs := make([][]float64, len(seq))
	for p, id := range seq {
		hs[p] = make([]float64, d)
		for i := range d {
			hs[p][i] = float64(m.embd[id*d+i])
		}
	}
	for _, l := range m.layers {
		qs, ks, vs := make([][]float64, len(seq)), make([][]float64, len(seq)), make([][]float64, len(seq))
		for p := range seq {
			x := rmsNorm(hs[p], l.attnNorm)
			qs[p], ks[p], vs[p] = matvec(l.q, x), matvec(l.k, x), matvec(l.v, x)
			rope(qs[p], hd, p)
			rope(ks[p], hd, p)
		}
		for p := range seq {
			att := make([]float64, d)
			for h := range m.s.Heads {
				kv := h / group
				w := make([]float64, p+1)
				mx := math.Inf(-1)
				for j := 0; j <= p; j++ {
					var dot float64
					for i := range hd {
						dot += qs[p][h*hd+i] * ks[j][kv*hd+i]
					}
					w[j] = dot / math.Sqrt(float64(hd))
					mx = max(mx, w[j])
				}
				var sum float64
				for j := range w {
					w[j] = math.Exp(w[j] - mx)
					sum += w[j]
				}
				for j := range w {
					for i := range hd {
						att[h*hd+i] += w[j] / sum * vs[j][kv*hd+i]
					}
				}
			}
			o := matvec(l.o, att)
			for i := range d {
				hs[p][i] += o[i]
			}
			x := rmsNorm(hs[p], l.ffnNorm)
			g, u := matvec(l.gate, x), matvec(l.up, x)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			dn := matvec(l.down, g)
			for i := range d {
				hs[p][i] += dn[i]
			}
		}
	}
	return matvec(m.out, rmsNorm(hs[len(seq)-1], m.onorm))
}
