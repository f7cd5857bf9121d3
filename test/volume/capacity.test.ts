import { describe, expect, it } from 'vitest';
import { GiB, KiB, MiB, roundDownCapacityPretty, TiB } from '../../src/volume/capacity.ts';
import { formatQuantity, parseQuantity } from '../../src/util/quantity.ts';

describe('roundDownCapacityPretty', () => {
  // The Go provisioner's TestRoundDownCapacityPretty vectors (reconstructed from the behaviour spec).
  const vectors: [string, bigint, bigint][] = [
    ['100 KiB stays', 100n * KiB, 100n * KiB],
    ['10 MiB stays', 10n * MiB, 10n * MiB],
    ['100 MiB stays', 100n * MiB, 100n * MiB],
    ['10 GiB stays', 10n * GiB, 10n * GiB],
    ['10 TiB stays', 10n * TiB, 10n * TiB],
    ['9 GiB + 999 MiB stays (under 10 GiB, whole MiB)', 9n * GiB + 999n * MiB, 9n * GiB + 999n * MiB],
    ['10 GiB + 5 -> 10 GiB', 10n * GiB + 5n, 10n * GiB],
    ['10 MiB + 5 -> 10 MiB', 10n * MiB + 5n, 10n * MiB],
    ['10000 MiB - 1 -> 9999 MiB', 10000n * MiB - 1n, 9999n * MiB],
    ['13 GiB - 1 -> 12 GiB', 13n * GiB - 1n, 12n * GiB],
    ['63 MiB - 10 -> 62 MiB', 63n * MiB - 10n, 62n * MiB],
    ['12345 stays', 12345n, 12345n],
    ['10 MiB - 1 stays (9 MiB would be under 10 units)', 10n * MiB - 1n, 10n * MiB - 1n],
    ['3 TiB + 2 GiB + 1 MiB -> 3 TiB + 2 GiB', 3n * TiB + 2n * GiB + 1n * MiB, 3n * TiB + 2n * GiB],
  ];
  it.each(vectors)('%s', (_name, input, want) => {
    expect(roundDownCapacityPretty(input)).toBe(want);
  });

  it('keeps 0', () => {
    expect(roundDownCapacityPretty(0n)).toBe(0n);
  });
});

describe('formatQuantity (BinarySI canonical form)', () => {
  const vectors: [bigint, string][] = [
    [0n, '0'],
    [1n, '1'],
    [10n, '10'],
    [100n, '100'],
    [500n, '500'],
    [999n, '999'],
    [1000n, '1k'],
    [1020n, '1020'],
    [1023n, '1023'],
    [1024n, '1Ki'],
    [1025n, '1025'],
    [2000n, '2000'],
    [2048n, '2Ki'],
    [12345n, '12345'],
    [100n * KiB, '100Ki'],
    [1536n * KiB, '1536Ki'],
    [10n * MiB, '10Mi'],
    [10n * GiB, '10Gi'],
    [9n * GiB + 999n * MiB, '10215Mi'],
    [3n * TiB + 2n * GiB, '3074Gi'],
    [10n * TiB, '10Ti'],
    [1024n * TiB, '1Pi'],
    [1024n ** 6n, '1Ei'],
    [7n * 1024n ** 6n, '7Ei'],
    [-1000n, '-1k'],
    [-1023n, '-1023'],
    [-1024n, '-1Ki'],
    [-3n * MiB, '-3Mi'],
  ];
  it.each(vectors)('%s -> %s', (input, want) => {
    expect(formatQuantity(input)).toBe(want);
  });

  it('formats rounded real-world sizes', () => {
    expect(formatQuantity(roundDownCapacityPretty(20n * MiB - 4096n))).toBe('19Mi');
    expect(formatQuantity(roundDownCapacityPretty(499_000_000_000n))).toBe('464Gi');
  });
});

describe('parseQuantity', () => {
  it('reads the Quantity forms a PV capacity can take', () => {
    expect(['12Mi', '10Gi', '1Ti', '12345', '1k', '1.5G', '1e3', '500m', '0'].map(parseQuantity)).toEqual([
      12 * 2 ** 20,
      10 * 2 ** 30,
      2 ** 40,
      12345,
      1000,
      1.5e9,
      1000,
      0.5,
      0,
    ]);
    expect(['', 'Gi', '12 Mi', '1.2.3', 'abc', '12Xi'].map(parseQuantity)).toEqual([undefined, undefined, undefined, undefined, undefined, undefined]);
  });
});
