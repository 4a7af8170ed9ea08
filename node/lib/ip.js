'use strict';
/**
 * Client addresses as rate-limit keys: an IPv4 address as it is, an IPv6 address by its
 * network prefix (a /56 by default: one customer's allocation, so a client cannot mint a fresh
 * key per address of its /64; express-rate-limit #502's ask), an IPv4-mapped IPv6 address
 * (::ffff:192.0.2.1) as its IPv4 address.
 */

const net = require('node:net');

/** The 8 hextets of an IPv6 address (with an embedded IPv4 tail), or null. */
function hextets(address) {
  let text = address.split('%')[0];
  const tail = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (tail !== null) {
    const parts = tail[1].split('.').map(Number);
    text = `${text.slice(0, -tail[1].length)}${((parts[0] << 8) | parts[1]).toString(16)}:${((parts[2] << 8) | parts[3]).toString(16)}`;
  }
  const halves = text.split('::');
  if (halves.length > 2) return null;
  const head = halves[0] ? halves[0].split(':') : [];
  const rest = halves.length === 2 && halves[1] ? halves[1].split(':') : [];
  const missing = 8 - head.length - rest.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return null;
  const all = [...head, ...Array(halves.length === 2 ? missing : 0).fill('0'), ...rest].map((h) => parseInt(h, 16));
  return all.length === 8 && all.every((h) => h >= 0 && h <= 0xffff) ? all : null;
}

/** An IPv6 address's 8 hextets in the shortest form (RFC 5952). */
function format(words) {
  let best = [-1, 0];
  for (let start = 0; start < 8; ) {
    if (words[start] !== 0) {
      start += 1;
      continue;
    }
    let end = start;
    while (end < 8 && words[end] === 0) end += 1;
    if (end - start > best[1] && end - start > 1) best = [start, end - start];
    start = end;
  }
  const hex = words.map((word) => word.toString(16));
  if (best[0] < 0) return hex.join(':');
  return `${hex.slice(0, best[0]).join(':')}::${hex.slice(best[0] + best[1]).join(':')}`;
}

/**
 * The key of client address `ip`: IPv4 as it is; IPv6 as its /`ipv6Subnet` network
 * (`2001:db8:1234:5600::/56`); IPv4-mapped IPv6 as IPv4. `ipv6Subnet` false keys each IPv6
 * address alone. Anything that is not an address is returned as it is.
 */
function ipKey(ip, { ipv6Subnet = 56 } = {}) {
  const address = String(ip || '');
  if (net.isIPv4(address)) return address;
  if (!net.isIPv6(address)) return address;
  const words = hextets(address);
  if (words === null) return address;
  if (words.slice(0, 5).every((w) => w === 0) && words[5] === 0xffff) {
    return `${words[6] >> 8}.${words[6] & 255}.${words[7] >> 8}.${words[7] & 255}`;
  }
  if (ipv6Subnet === false) return format(words);
  const bits = Number(ipv6Subnet);
  if (!Number.isInteger(bits) || bits < 1 || bits > 128) throw new RangeError(`ipv6Subnet is a prefix length from 1 to 128 (got ${ipv6Subnet})`);
  const masked = words.map((word, index) => {
    const keep = Math.min(Math.max(bits - index * 16, 0), 16);
    return keep === 16 ? word : keep === 0 ? 0 : word & (0xffff << (16 - keep)) & 0xffff;
  });
  return `${format(masked)}/${bits}`;
}

module.exports = { ipKey };
