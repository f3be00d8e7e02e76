package replay

import "strconv"

// Synthetic prompts are lists of token IDs, which vLLM's /v1/completions accepts as `prompt`
// in place of text. Sending IDs fixes the prompt length exactly (no tokenizer in between) and
// lets the replay decide exactly which calls share leading tokens, so that a server's prefix
// cache sees the sharing the workload describes and no other.
//
// The IDs are drawn from [PromptIDLow, PromptIDHigh): clear of the low IDs where tokenizers
// keep their special and control tokens (Llama-2 and Mistral: <unk> <s> </s> and byte
// fallbacks below 259, Mistral v3's control tokens below 771, Gemma's <pad> <eos> <bos>
// <unk> <mask> and <unusedN> below 108) and of the high ones where Llama-3 (128000 and up),
// Qwen2 (151643 and up) and GLM-4 (151329 and up) keep theirs, and inside the smallest common
// vocabulary (32,000: Llama-2, Mistral-7B).

const (
	// PromptIDLow is the smallest token ID of a synthetic prompt.
	PromptIDLow = 1000
	// PromptIDHigh bounds the token IDs of a synthetic prompt (exclusive) for vocabularies of
	// at least PromptIDHigh + PromptIDLow tokens; a smaller vocabulary V lowers it to
	// V - PromptIDLow.
	PromptIDHigh = 30000
	// MinVocab is the smallest vocabulary PromptIDs serves: it leaves PromptIDLow IDs clear at
	// each end and at least 1,024 to draw from. Smaller values of vocab are raised to it.
	MinVocab = 2*PromptIDLow + 1024
)

// Stream tags keep the question's stream and the calls' own streams apart.
const (
	streamQuestion uint64 = 0x5155455354494f4e // "QUESTION"
	streamCall     uint64 = 0x43414c4c         // "CALL"
)

// PromptIDs returns the prompt of one call as inputTokens token IDs, a pure function of its
// arguments:
//
//   - the first prefixTokens IDs (clamped to [0, inputTokens]) come from the query's shared
//     stream, keyed by (seed, query): every call of the query that marks a prefix starts with
//     the same IDs, the question;
//   - the rest come from the call's own stream, keyed by (seed, query, call); its first ID is
//     chosen to differ both from the query's stream at that position and from the first own
//     ID of any other call of the query whose ID differs by less than the ID range, so two
//     calls a, b of one query share exactly min(prefix_a, prefix_b) leading tokens, never
//     more;
//   - calls of different queries draw independent streams: they share their first n tokens
//     with probability r^-n (r, the ID range, is 29,000 by default), so never a whole KV
//     block (vLLM's prefix cache hits in blocks of 16 tokens: r^-16 < 1e-71).
//
// vocab is the model's vocabulary size (0: unknown, the default range). The IDs are drawn by
// SplitMix64 indexed by position, so a prompt is the same on every platform and Go version.
func PromptIDs(seed uint64, query, call, inputTokens, prefixTokens, vocab int) []int {
	if inputTokens <= 0 {
		return []int{}
	}
	lo, hi := PromptIDLow, PromptIDHigh
	if vocab > 0 {
		hi = min(hi, max(vocab, MinVocab)-PromptIDLow)
	}
	return promptStream(seed, query, call, inputTokens, prefixTokens, lo, hi)
}

// PromptText returns the prompt of one call as a text of words words ("w17 w3 w250 ...") drawn
// from w0 ... w{vocab-1} (vocab at least 2) as PromptIDs draws IDs, with the same sharing: the
// first prefixWords words are the query's, the rest the call's own. It is for servers that
// take text prompts only (Ollama) and models whose tokenizer makes each such word one token
// (as the models `mosaic` generates for them do).
func PromptText(seed uint64, query, call, words, prefixWords, vocab int) string {
	if words <= 0 {
		return ""
	}
	ids := promptStream(seed, query, call, words, prefixWords, 0, max(vocab, 2))
	b := make([]byte, 0, 5*len(ids))
	for i, id := range ids {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, 'w')
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return string(b)
}

// promptStream draws n values of [lo, hi) for one call's prompt as PromptIDs describes.
func promptStream(seed uint64, query, call, inputTokens, prefixTokens, lo, hi int) []int {
	if inputTokens <= 0 {
		return []int{}
	}
	prefix := min(max(prefixTokens, 0), inputTokens)
	span := uint64(hi - lo)
	question := streamKey(seed, streamQuestion, uint64(query), 0)
	own := streamKey(seed, streamCall, uint64(query), uint64(call))
	ids := make([]int, inputTokens)
	for i := range ids {
		switch {
		case i < prefix:
			ids[i] = lo + int(draw(question, i)%span)
		case i == prefix:
			// Differs from the question at this position, and from the other calls' first
			// own IDs: an offset in [1, span-1] that depends on the call.
			shared := draw(question, i) % span
			offset := 1 + uint64(call)%(span-1)
			ids[i] = lo + int((shared+offset)%span)
		default:
			ids[i] = lo + int(draw(own, i)%span)
		}
	}
	return ids
}

// streamKey derives the key of one stream from the seed, a tag and two identifiers.
func streamKey(seed, tag, a, b uint64) uint64 {
	return splitmix(splitmix(splitmix(seed^tag)^a) ^ b)
}

// draw is the i-th value of the stream with key k.
func draw(k uint64, i int) uint64 {
	return splitmix(k + uint64(i+1)*0x9e3779b97f4a7c15)
}

// splitmix is SplitMix64's output function.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
