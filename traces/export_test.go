package traces

// PairwiseTopAnswer is TopAnswer's pairwise count, which its table count of one-byte answers
// must match.
var PairwiseTopAnswer = topAnswer
