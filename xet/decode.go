package xet

// DecodeChunks validates a chunk stream (a whole stored xorb, or the slice
// of one that a fetch URL serves) and returns every chunk's uncompressed
// bytes, in order. It checks each chunk as ParseXorb does but has no hash
// to compare the whole against; callers that know the chunk hashes compare
// them with the returned XorbInfo.
func DecodeChunks(stream []byte) ([][]byte, error) {
	var out [][]byte
	_, err := parseXorb(stream, func(_ int, data []byte) {
		out = append(out, append([]byte(nil), data...))
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
