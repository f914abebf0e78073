package redisstore

import (
	"strconv"
	"strings"
)

// Slot returns the Redis Cluster hash slot of key, honouring {hash tags}
// as Redis does: CRC16 (XMODEM) of the tag, modulo 16384.
func Slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}

func formatInt(v int64) string { return strconv.FormatInt(v, 10) }
