package xet

// DecodeChunks validates a chunk stream (a whole stored xorb, or the slice
// of one that a fetch URL serves) and returns every chunk's uncompressed
// bytes, in order, each in a slice of its own. It checks each chunk's
// format as ParseXorb does but hashes nothing: a stream has no hash to
// compare against, and the callers check what they assemble (a file's
// hash, a test's bytes).
func DecodeChunks(stream []byte) ([][]byte, error) {
	var out [][]byte
	_, err := walkXorb(stream, func(_ int, data []byte) {
		out = append(out, append([]byte(nil), data...))
	}, false)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AppendChunks is DecodeChunks for a caller that wants the bytes in one
// piece: it appends every chunk's uncompressed bytes to dst and returns
// the extended slice and the number of chunks. On error dst is returned
// as it was given, with count 0.
func AppendChunks(dst, stream []byte) (out []byte, count int, err error) {
	out = dst
	info, err := walkXorb(stream, func(_ int, data []byte) {
		out = append(out, data...)
	}, false)
	if err != nil {
		return dst, 0, err
	}
	return out, len(info.Chunks), nil
}
