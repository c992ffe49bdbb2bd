"""The gpt's mesh cards in an --html page: the tokens each rank holds between the blocks,
checked against the head-tail and sequence-parallel layout worked out here. `expect(cond,
what)` is check_html.py's."""


def token_positions(text):
    """"0–1, 6–7" -> [0, 1, 6, 7]."""
    out = []
    for part in [x for x in text.split(", ") if x]:
        first, _, last = part.partition("–")
        out += range(int(first), int(last or first) + 1)
    return out


def check_tokens(by_rank, config, dp, tp, pp, cp, where, expect):
    """A gpt's tokens between the blocks: cp rank r holds chunks r and 2cp-1-r of the 2cp
    (computed here, not read from dtsim), under sequence parallelism tp rank t the t-th 1/tp
    of those; so every (stage, replica) holds each position once per tp rank, or once."""
    seq, sp = config["shape"]["seq"], config["sequence_parallel"]
    c = seq // (2 * cp)
    for g, a in by_rank.items():
        r, t = int(a["data-cp"]), int(a["data-tp"])
        mine = list(range(r * c, (r + 1) * c)) + list(range((2 * cp - 1 - r) * c, (2 * cp - r) * c))
        if sp:
            n = len(mine) // tp
            mine = mine[t * n:(t + 1) * n]
        got = token_positions(a.get("data-tokens", ""))
        expect(got == mine, f"{where}: rank {g} holds tokens {got}, want {mine}")
    for st in range(pp):
        for rep in range(dp):
            held = sorted(p for a in by_rank.values()
                          if int(a["data-pp"]) == st and int(a["data-dp"]) == rep
                          for p in token_positions(a["data-tokens"]))
            want = sorted(list(range(seq)) * (1 if sp else tp))
            expect(held == want, f"{where}: stage {st} replica {rep} tokens {held}")
