"""Tests of toymodel.py whose expected values come from MODEL.md itself (sections 2 and 11), plus properties and
known answers of the server on request edge cases (sections 8 and 9).

Run with: python3 -m unittest discover -s mock-server/reference -p 'test_*.py'
"""

import base64
import json
import math
import os
import struct
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from toymodel import (  # noqa: E402
    GOLDEN, PROMPT_HASH_START, TAIL_WEIGHT, ToyModel, chunk_due, find_printable_text, mix, routes, routes_base64, splitmix64, unit,
)

REL = 1e-12
HELLO = [72, 101, 108, 343, 422, 114, 108, 100]
EXAMPLE_REQUEST = {"input_ids": HELLO, "sampling_params": {"temperature": 0.7}}


def f32(x):
    """The nearest binary32 value of x (the wire format of section 8.5)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


class TokenizerTest(unittest.TestCase):
    """Section 2."""

    def setUp(self):
        self.model = ToyModel()

    def test_word_pieces(self):
        for token, text in [(256, " ba"), (257, "ba"), (258, " be"), (436, " baba"), (438, " beba")]:
            self.assertEqual(self.model.token_text(token), text)
            self.assertEqual(self.model.decode([token]), text)
            self.assertEqual(self.model.encode(text), [token])

    def test_syllable_numbers(self):
        # d = 0 is "ba", d = 1 "be", d = 5 "ca", d = 89 "zu" (one syllable, no space: w = 2d + 1).
        for d, text in [(0, "ba"), (1, "be"), (5, "ca"), (89, "zu")]:
            self.assertEqual(self.model.token_text(256 + 2 * d + 1), text)

    def test_hello_world(self):
        self.assertEqual(self.model.encode("Hello world"), HELLO)
        self.assertEqual(self.model.token_text(343), "lo")
        self.assertEqual(self.model.token_text(422), " wo")

    def test_special_tokens(self):
        v = self.model.vocab_size
        self.assertEqual(self.model.encode("<|endoftext|><|im_start|><|im_end|>"), [v - 3, v - 2, v - 1])
        self.assertEqual(self.model.token_text(v - 1), "<|im_end|>")
        self.assertEqual(self.model.decode([v - 2, 72, v - 1]), "H")
        self.assertEqual(self.model.decode([v - 2, 72, v - 1], skip_special_tokens=False), "<|im_start|>H<|im_end|>")

    def test_round_trip(self):
        for text in ["Hello world", "", " ", "  ba", "bababababa", " zuzuzu zu", "é€😀 ça", "<|im_end", "<|im_",
                     "<|endoftext|", "<<|im_start|>>", "a<|im_end|>b", "BA Ba bA", "\x00\n\t", "日本語 babe"]:
            self.assertEqual(self.model.decode(self.model.encode(text), skip_special_tokens=False), text)

    def test_bytes(self):
        self.assertEqual(self.model.token_text(65), "A")
        self.assertEqual(self.model.token_text(0xE2), "\ufffd")
        self.assertEqual(self.model.decode([0xE2, 0x82, ord("a")]), "\ufffda")
        self.assertEqual(self.model.encode("é"), [0xC3, 0xA9])


class HashingTest(unittest.TestCase):
    """Section 3 against the hashes of section 11."""

    def test_context_hash(self):
        key = 100 | 108 << 21 | 114 << 42
        self.assertEqual(key, 0x1C8000D800064)
        h = splitmix64(splitmix64(0 ^ key) ^ 8)
        self.assertEqual(h, 0x6C9752D8031C4B39)
        self.assertEqual(splitmix64(h + GOLDEN), 0xD583CDAD62ABDB10)
        self.assertEqual(unit(0xD583CDAD62ABDB10), 0.8340424106888088)

    def test_mix(self):
        prompt_hash = 0x50524F4D5054
        for token in HELLO:
            prompt_hash = mix(prompt_hash, token)
        self.assertEqual(prompt_hash, 0x120938F37831A034)
        key = mix(mix(mix(0, prompt_hash), 0xFFFFFFFFFFFFFFFF), 0)
        self.assertEqual(key, 0x7E3F4400C9447920)
        self.assertEqual(unit(mix(key, 0)), 0.9932351963286613)  # a 53-bit fraction: exact


class WorkedExampleTest(unittest.TestCase):
    """Every number of section 11."""

    @classmethod
    def setUpClass(cls):
        cls.model = ToyModel(seed=0, vocab_size=151936)
        cls.entries = cls.model.explicit_entries(HELLO)
        cls.dist = cls.model.distribution(HELLO, 0.7)

    def setUp(self):
        # The example's request is the first of its prompt (section 8.3's draw 0) in every test.
        self.model.reset_draws()

    def assertClose(self, actual, expected, rel=REL):
        self.assertTrue(math.isclose(actual, expected, rel_tol=rel, abs_tol=0.0),
                        f"{actual!r} != {expected!r} within {rel}")

    def test_hash_and_draws(self):
        self.assertEqual(self.entries.key, 0x1C8000D800064)
        self.assertEqual(self.entries.hash, 0x6C9752D8031C4B39)
        self.assertEqual(self.entries.draws, [
            0xD583CDAD62ABDB10, 0x1EB658A453D65637, 0x63371504B72A8FDE,
            0x398662618E014444, 0x1B508D6865A553E7, 0xC8A6B6D9997395D7,
        ])

    def test_weights(self):
        self.assertEqual(self.entries.draws[0] & 0x7FF, 784)
        self.assertClose(self.entries.flatness, 0.8354892633752781)
        self.assertEqual(self.entries.weights[0], 65.3125)
        table = [
            (0.6980242729187012, 0.7219553983759124, 47.15271195642678),
            (0.1604757308959961, 0.5198531824445602, 24.512487371440127),
            (0.23993968963623047, 0.5497292604033032, 13.47523155334709),
            (0.3300619125366211, 0.5836125277344586, 7.86431394865603),
            (0.2546048164367676, 0.5552429105978518, 4.366604566707059),
            (0.775118350982666, 0.7509404718974286, 3.2790600939124657),
            (0.03958320617675781, 0.47440119955319593, 1.555590041959089),
        ]
        for k, (jitter, ratio, weight) in enumerate(table):
            self.assertEqual(self.entries.jitters[k], jitter)  # a 21-bit fraction: exact
            self.assertClose(self.entries.ratios[k], ratio)
            self.assertClose(self.entries.weights[k + 1], weight)
        self.assertEqual(self.entries.turn_length, 0)
        self.assertClose(self.entries.weights[8], 0.0024787521766663585)

    def test_slot_ids(self):
        self.assertEqual((self.entries.rotation, self.entries.punctuation_pos, self.entries.punctuation), (7, 0, 33))
        self.assertEqual(self.model.word_count, 151677)
        self.assertEqual(self.entries.block, 18958)
        self.assertIsNone(self.entries.word_slots[0])
        table = [
            (1254834892, 0, 2769, 5794),
            (4043493461, 18958, 8923, 37060),
            (2735209319, 37916, 6036, 50244),
            (1946350532, 56874, 4295, 65720),
            (3982803235, 75832, 8790, 93668),
            (3412099955, 94790, 7530, 110106),
            (2911049112, 113748, 6424, 126853),
        ]
        for k, (r, start, pair, token) in enumerate(table, start=1):
            self.assertEqual(tuple(self.entries.word_slots[k]), (r, start, pair, token))
        self.assertEqual(self.entries.word_slots[7].r & 7, 0)
        self.assertTrue(all(self.entries.word_slots[k].r & 7 != 0 for k in range(1, 7)))
        self.assertEqual(self.entries.ids, [33, 5794, 37060, 50244, 65720, 93668, 110106, 126853, 151935])
        self.assertEqual(self.model.token_text(33), "!")
        self.assertEqual(self.model.token_text(110106), " hasuca")
        self.assertEqual(self.model.token_text(151935), "<|im_end|>")

    def test_logprobs(self):
        dist = self.dist
        self.assertEqual(dist.ids, [33, 5794, 37060, 50244, 65720, 93668, 110106, 126853, 151935])
        self.assertEqual(dist.tail_count, 151927)
        self.assertClose(dist.tail_logit, -17.142857142857142)
        self.assertClose(dist.shift, 5.970262060227329)
        self.assertClose(dist.normaliser, 2.067688236474457)
        self.assertClose(dist.log_normaliser, 6.696693249451836)
        table = [
            (33, 5.970262060227329, -0.726431189224507, 0.4836319),
            (5794, 5.504845035798635, -1.1918482136532011, 0.3036595),
            (37060, 4.570260966191086, -2.1264322832607503, 0.1192620),
            (50244, 3.7155047150989726, -2.9811885343528632, 0.0507325),
            (65720, 2.9461932918691778, -3.750499957582658, 0.0235060),
            (93668, 2.10569388581868, -4.590999363633156, 0.0101427),
            (110106, 1.6965097494240315, -5.000183500027804, 0.0067367),
            (126853, 0.6312213169487644, -6.065471932503072, 0.0023217),
            (151935, -8.571428571428571, -15.268121820880406, 2.3396e-07),
        ]
        for i, (token, logit, logprob, probability) in enumerate(table):
            self.assertClose(dist.logits[i], logit)
            self.assertClose(dist.logprob(token), logprob)
            self.assertAlmostEqual(math.exp(dist.logprob(token)), probability, delta=0.6 * 10 ** -7)
        for token in (0, 1, 32, 151934, 151933):
            self.assertClose(dist.logprob(token), -23.83955039230898)
        self.assertClose(math.exp(dist.tail_logprob), 4.432e-11, rel=1e-3)
        self.assertClose(dist.tail_count * math.exp(dist.tail_logprob), 6.7336e-06, rel=1e-4)
        self.assertEqual(dist.logprob(151936), -math.inf)
        self.assertEqual(dist.logprob(-1), -math.inf)

    def test_top_list(self):
        top = self.dist.top(11)
        self.assertEqual([t for t, _ in top], [33, 5794, 37060, 50244, 65720, 93668, 110106, 126853, 151935, 0, 1])
        self.assertClose(top[6][1], -5.000183500027804)
        self.assertClose(top[9][1], -23.83955039230898)
        self.assertEqual(f32(top[10][1]), f32(-23.83955))

    def test_first_draw(self):
        u0 = 0.9932351963286613
        self.assertClose(u0 * self.dist.normaliser, 2.053700731501171)
        self.assertEqual(self.dist.sample(None, 1.0, 0.0, u0), 110106)
        [sample] = self.model.generate(dict(EXAMPLE_REQUEST, return_logprob=True, top_logprobs_num=11,
                                            sampling_params={"temperature": 0.7, "max_new_tokens": 1}))
        self.assertEqual(sample["output_ids"], [110106])
        self.assertEqual(sample["text"], " hasuca")
        self.assertEqual(sample["finish_reason"], {"type": "length", "length": 1})
        logprob, token, text = sample["output_token_logprobs"][0]
        self.assertEqual((token, text), (110106, None))
        self.assertClose(logprob, -5.000183500027804)
        self.assertEqual(f32(logprob), f32(-5.0001836))
        top = sample["output_top_logprobs"][0]
        self.assertEqual([t for _, t, _ in top], [33, 5794, 37060, 50244, 65720, 93668, 110106, 126853, 151935, 0, 1])
        self.assertEqual(sample["input_token_logprobs"], [])

    def test_text_in_logprobs(self):
        [sample] = self.model.generate(dict(EXAMPLE_REQUEST, return_logprob=True, return_text_in_logprobs=True))
        self.assertEqual(sample["output_ids"][0], 110106)
        self.assertEqual(sample["output_token_logprobs"][0][1:], [110106, " hasuca"])
        self.assertEqual(sample["prompt_tokens"], 8)
        self.assertEqual(sample["completion_tokens"], len(sample["output_ids"]))

    def test_command_line(self):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "toymodel.py")
        body = json.dumps(dict(EXAMPLE_REQUEST, sampling_params={"temperature": 0.7, "max_new_tokens": 2}))
        answer = subprocess.run([sys.executable, script, "--seed", "0", body], check=True, capture_output=True,
                                text=True).stdout
        [sample] = json.loads(answer)
        self.assertEqual(sample["output_ids"][0], 110106)
        self.assertEqual(sample, self.model.generate(json.loads(body))[0])


class PropertyTest(unittest.TestCase):
    """Properties stated by sections 4 to 9."""

    @classmethod
    def setUpClass(cls):
        cls.model = ToyModel(seed=7)
        cls.contexts = [HELLO, [5], cls.model.encode("The cat sat on the mat. babe"), [151935, 300, 301]]

    def test_filtered_sums_to_one(self):
        for context in self.contexts:
            for temperature in (0.01, 0.7, 1.0, 1.3):
                dist = self.model.distribution(context, temperature)
                for top_k, top_p, min_p in [(None, 1.0, 0.0), (3, 1.0, 0.0), (None, 0.9, 0.0), (None, 1.0, 0.05),
                                            (20, 0.99999, 0.0), (None, 1.0, 1e-9), (1, 0.5, 0.5)]:
                    explicit, tail, p_tail = dist.filtered(top_k, top_p, min_p)
                    total = sum(p for _, p in explicit) + tail * p_tail
                    self.assertAlmostEqual(total, 1.0, delta=1e-9)
                    self.assertEqual(len(explicit) + tail, dist.kept(top_k, top_p, min_p))

    def test_top_is_descending(self):
        for context in self.contexts:
            for temperature in (0.01, 1.0, 1.7):
                top = self.model.distribution(context, temperature).top(40)
                self.assertEqual(len(top), 40)
                logprobs = [lp for _, lp in top]
                self.assertEqual(logprobs, sorted(logprobs, reverse=True))
                self.assertEqual(len({t for t, _ in top}), 40)

    def test_small_temperatures_are_finite(self):
        for temperature in (0.01, 2e-6):
            dist = self.model.distribution(HELLO, temperature)
            for token in dist.ids + [0, 1000, 151934]:
                self.assertTrue(math.isfinite(dist.logprob(token)))
        self.assertLess(self.model.distribution(HELLO, 0.01).tail_logprob, -1000)

    def test_greedy(self):
        for context in self.contexts:
            first = self.model.distribution(context, 1.0).top(1)[0][0]
            for temperature in (0, 5e-7):
                [sample] = self.model.generate({"input_ids": context, "sampling_params": {
                    "temperature": temperature, "max_new_tokens": 1}})
                self.assertEqual(sample["output_ids"], [first])

    def test_mask(self):
        # At seed 0 the explicit entries of HELLO are those of section 11: 33 and 151935 are two of them.
        dist = ToyModel().distribution(HELLO, 1.0, masked=(151935, 151933, 33))
        self.assertEqual(dist.logprob(151935), -math.inf)
        self.assertEqual(dist.tail_count, 151936 - 7 - 3)
        self.assertEqual(dist.tail_id(0), 0)
        self.assertEqual(dist.tail_id(33), 34)
        self.assertAlmostEqual(sum(math.exp(lp) for lp in [dist.logprob(t) for t in dist.ids])
                               + dist.tail_count * math.exp(dist.tail_logprob), 1.0, delta=1e-12)

    def test_tail_weight(self):
        self.assertTrue(math.isclose(TAIL_WEIGHT, 6.14421235332821e-06, rel_tol=1e-14))

    def test_zero_new_tokens(self):
        [sample] = self.model.generate({"text": "Hello", "sampling_params": {"max_new_tokens": 0}})
        self.assertEqual(sample["output_ids"], [])
        self.assertEqual(sample["text"], "")
        self.assertEqual(sample["finish_reason"], {"type": "length", "length": 0})

    def test_sampling_mask_is_the_kept_prefix_renormalised(self):
        # Section 7.1: the support of top_k = 5 is the top 5 of the sorted order; its logprobs sum to 1.
        dist = self.model.distribution(HELLO, 0.7)
        ids, logprobs, selected = dist.support(5, 1.0, 0.0, dist.top(5)[2][0])
        self.assertEqual(ids, [token for token, _ in dist.top(5)])
        self.assertAlmostEqual(sum(math.exp(lp) for lp in logprobs), 1.0, delta=1e-12)
        self.assertEqual(selected, logprobs[2])
        self.assertEqual(dist.support(5, 1.0, 0.0, -1)[2], -math.inf)

    def test_routes_rows_and_prefixes(self):
        # Section 12: a row per position but the last, K distinct experts per layer, each row fixed by its prefix.
        shape = (3, 16, 4)
        rows = routes(0, shape, [5, 6, 7, 8], 0)
        self.assertEqual(len(rows), 3)
        for row in rows:
            self.assertEqual(len(row), 3)
            for layer in row:
                self.assertEqual(len(set(layer)), 4)
                self.assertTrue(all(0 <= e < 16 for e in layer))
        self.assertEqual(routes(0, shape, [5, 6, 7, 9, 1], 0)[:3], rows)
        self.assertEqual(routes(0, shape, [5, 6, 7, 8], 2), rows[2:])
        flat = [e for row in rows for layer in row for e in layer]
        self.assertEqual(base64.b64decode(routes_base64(rows)), struct.pack(f"<{len(flat)}i", *flat))

    def test_null_max_new_tokens_is_the_context_window(self):
        # Section 8.2: an absent max_new_tokens is 128, a null one no limit but L - len(prompt) - 2.
        model = ToyModel(context_length=300)
        params = {"ignore_eos": True}
        [unlimited] = model.generate({"input_ids": [5, 6, 7], "sampling_params": dict(params, max_new_tokens=None)})
        self.assertEqual(unlimited["finish_reason"], {"type": "length", "length": 295})
        [default] = model.generate({"input_ids": [5, 6, 7], "sampling_params": params})
        self.assertEqual(default["finish_reason"], {"type": "length", "length": 128})

    def test_batch_and_n_positions(self):
        params = {"n": 2, "max_new_tokens": 6, "temperature": 1.3}
        batch = self.model.generate({"text": ["Hello", "world"], "sampling_params": params})
        self.assertEqual(len(batch), 4)
        # Sample j of prompt b is at position b * n + j (section 8.1), and the key depends on the prompt and the
        # position only (section 8.3): prompt 0's samples are those of the single prompt with the same n.
        # Each answer is a first draw (section 8.3): the history is forgotten before it.
        self.model.reset_draws()
        single = self.model.generate({"text": "Hello", "sampling_params": params})
        self.assertEqual([s["output_ids"] for s in single], [s["output_ids"] for s in batch[:2]])
        self.model.reset_draws()
        first = self.model.generate({"input_ids": self.model.encode("Hello"), "sampling_params": dict(params, n=1)})
        self.assertEqual(first[0]["output_ids"], batch[0]["output_ids"])

    def test_min_new_tokens_masks_end_of_sequence(self):
        [sample] = self.model.generate({"text": "Hello", "return_logprob": True, "sampling_params": {
            "max_new_tokens": 30, "min_new_tokens": 30, "temperature": 1.5}})
        self.assertEqual(len(sample["output_ids"]), 30)
        self.assertNotIn(151935, sample["output_ids"])
        self.assertNotIn(151933, sample["output_ids"])

    def test_script(self):
        model = ToyModel(scripts=[{"prompt_contains": "capital", "answer": "Paris babe", "finish_reason": "stop"}])
        [sample] = model.generate({"text": "The capital?", "return_logprob": True})
        self.assertEqual(sample["output_ids"], model.encode("Paris babe") + [151935])
        self.assertEqual(sample["text"], "Paris babe")
        self.assertEqual(sample["finish_reason"], {"type": "stop", "matched": 151935})
        self.assertTrue(all(lp is not None for lp, _, _ in sample["output_token_logprobs"]))


class RequestRulesTest(unittest.TestCase):
    """Sections 8 and 9 on request edge cases, with the answers and error texts of the server (`sglang-mock oracle`)."""

    PROMPT = [72, 101, 5]

    def generate(self, body, **options):
        return ToyModel(**options).generate(body)

    def test_token_ids_logprob_out_of_range_is_refused(self):
        # Section 8.5: a 400 whether or not return_logprob is set, never -inf.
        for ids, bad in [([151936], 151936), ([5, -1], -1)]:
            for return_logprob in (True, False):
                with self.assertRaisesRegex(ValueError, rf"^token_ids_logprob contains out-of-vocabulary token id "
                                                        rf"{bad}; valid range is \[0, 151936\)\.$"):
                    self.generate({"input_ids": HELLO, "return_logprob": return_logprob, "token_ids_logprob": ids})
        with self.assertRaisesRegex(ValueError, "must be a flat list of integers"):
            self.generate({"input_ids": HELLO, "return_logprob": True, "token_ids_logprob": [[5]]})

    def test_empty_token_ids_logprob_is_absent(self):
        # Section 8.5: [] reports no token-id lists at all; a batch's [] does so for its prompt only.
        [sample] = self.generate({"input_ids": HELLO, "return_logprob": True, "token_ids_logprob": [],
                                  "sampling_params": {"max_new_tokens": 2}})
        self.assertNotIn("output_token_ids_logprobs", sample)
        self.assertNotIn("input_token_ids_logprobs", sample)
        first, second = self.generate({"input_ids": [HELLO, [5]], "return_logprob": True,
                                       "token_ids_logprob": [[], [5]], "sampling_params": {"max_new_tokens": 2}})
        self.assertNotIn("output_token_ids_logprobs", first)
        self.assertEqual([[entry[1] for entry in row] for row in second["output_token_ids_logprobs"]], [[5], [5]])

    def test_logprob_start_len_at_the_prompt_end(self):
        # Sections 8.5 and 9: allowed from 0.5.15 (no input logprobs), refused by 0.5.3; past the end refused.
        body = {"input_ids": [72, 101], "return_logprob": True, "logprob_start_len": 2,
                "sampling_params": {"max_new_tokens": 1}}
        [sample] = self.generate(body)
        self.assertEqual(sample["input_token_logprobs"], [])
        self.assertEqual(sample["output_ids"], [132142])
        message = (r"^req\.logprob_start_len={} is higher than the number of input tokens "
                   r"len\(req\.origin_input_ids\)=2\. Please use a smaller logprob_start_len\.$")
        with self.assertRaisesRegex(ValueError, message.format(2)):
            self.generate(body, sglang_version="0.5.3")
        with self.assertRaisesRegex(ValueError, message.format(3)):
            self.generate(dict(body, logprob_start_len=3))
        # Read only with return_logprob; any negative start is -1.
        self.generate(dict(body, logprob_start_len=3, return_logprob=False))
        [sample] = self.generate(dict(body, logprob_start_len=-2), sglang_version="0.5.3")
        self.assertEqual(len(sample["input_token_logprobs"]), 1)

    def test_max_new_tokens_beyond_the_context_window_is_refused(self):
        # Section 8.2 with L = 300 and a prompt of 3: 297 runs as 295, 298 is refused, null is 295.
        params = {"ignore_eos": True}
        [sample] = self.generate({"input_ids": self.PROMPT, "sampling_params": dict(params, max_new_tokens=297)},
                                 context_length=300)
        self.assertEqual(sample["finish_reason"], {"type": "length", "length": 295})
        with self.assertRaisesRegex(ValueError, r"^Requested token count exceeds the model's maximum context length "
                                                r"of 300 tokens\. You requested a total of 301 tokens: 3 tokens from "
                                                r"the input messages and 298 tokens for the completion\. Please "
                                                r"reduce the number of tokens in the input messages or the "
                                                r"completion to fit within the limit\.$"):
            self.generate({"input_ids": self.PROMPT, "sampling_params": dict(params, max_new_tokens=298)},
                          context_length=300)
        # The absent default (128) is capped, an explicit 128 refused.
        [sample] = self.generate({"input_ids": self.PROMPT, "sampling_params": params}, context_length=100)
        self.assertEqual(sample["finish_reason"], {"type": "length", "length": 95})
        with self.assertRaisesRegex(ValueError, "total of 131 tokens"):
            self.generate({"input_ids": self.PROMPT, "sampling_params": dict(params, max_new_tokens=128)},
                          context_length=100)
        # A prompt of L - 1 tokens is accepted and generates nothing; one of L tokens is refused.
        [sample] = self.generate({"input_ids": [5] * 9, "sampling_params": {"max_new_tokens": 1}}, context_length=10)
        self.assertEqual(sample["finish_reason"], {"type": "length", "length": 0})
        with self.assertRaisesRegex(ValueError, r"^The input \(10 tokens\) is longer than the model's context "
                                                r"length \(10 tokens\)\.$"):
            self.generate({"input_ids": [5] * 10, "sampling_params": {"max_new_tokens": 1}}, context_length=10)

    def test_sampling_seeds(self):
        # Section 8.3: a boolean is 1 or 0 (refused by 0.5.23's gate); 0.5.3's default of 42 seeds only under
        # deterministic inference.
        def draw(seed=..., **options):
            params = {"temperature": 1.3, "max_new_tokens": 4}
            if seed is not ...:
                params["sampling_seed"] = seed
            return self.generate({"input_ids": self.PROMPT, "sampling_params": params}, **options)[0]["output_ids"]

        seed_1, seed_0 = [23102, 35584, 134446, 40159], [7854, 132280, 18118, 34516]
        unseeded, seed_42 = [7854, 132280, 45429, 133754], [7854, 38308, 115374, 123494]
        for version in ("0.5.3", "0.5.15"):
            self.assertEqual(draw(True, sglang_version=version), seed_1)
            self.assertEqual(draw(False, sglang_version=version), seed_0)
        self.assertEqual(draw(1), seed_1)
        with self.assertRaisesRegex(ValueError, "expected i64"):
            draw(True)
        self.assertEqual(draw(sglang_version="0.5.3"), unseeded)
        self.assertEqual(draw(42, sglang_version="0.5.3"), seed_42)
        self.assertEqual(draw(sglang_version="0.5.3", deterministic_inference=True), seed_42)
        self.assertEqual(draw(True, sglang_version="0.5.3", deterministic_inference=True), seed_1)
        with self.assertRaisesRegex(ValueError, "^sampling_seed should not be None$"):
            draw(None, sglang_version="0.5.3")

    def test_stop_strings_read_the_skip_special_tokens_text(self):
        # Section 9, check 6.3: by default <|im_end|> adds nothing to the text, so "babe" matches across it.
        model = ToyModel(scripts=[{"prompt_contains": "Q", "answer": "ba<|im_end|>be!!", "finish_reason": "length"}])
        params = {"stop": "babe", "ignore_eos": True}
        [sample] = model.generate({"text": "Q", "sampling_params": params})
        self.assertEqual(sample["output_ids"], [257, 151935, 259])
        self.assertEqual((sample["text"], sample["finish_reason"]), ("", {"type": "stop", "matched": "babe"}))
        [sample] = model.generate({"text": "Q", "sampling_params": dict(params, skip_special_tokens=False)})
        self.assertEqual(sample["text"], "ba<|im_end|>be!!")
        self.assertEqual(sample["finish_reason"], {"type": "length", "length": 5})
        # "<|im_end|>" as a stop string matches only when special tokens are kept.
        model = ToyModel(scripts=[{"prompt_contains": "Q", "answer": "babe", "finish_reason": "stop"}])
        params = {"stop": "<|im_end|>", "ignore_eos": True, "max_new_tokens": 5, "temperature": 0}
        [sample] = model.generate({"text": "Q", "sampling_params": params})
        self.assertEqual(sample["output_ids"], [617, 151935, 116011, 79038, 23254])
        self.assertEqual(sample["finish_reason"], {"type": "length", "length": 5})
        [sample] = model.generate({"text": "Q", "sampling_params": dict(params, skip_special_tokens=False)})
        self.assertEqual((sample["text"], sample["finish_reason"]), ("babe", {"type": "stop", "matched": "<|im_end|>"}))

    def test_unseeded_draws(self):
        # Section 8.3: identical unseeded requests draw anew, numbered per prompt and position; a seed, or
        # deterministic inference, draws the same every time; a reset repeats the sequence.
        body = {"input_ids": HELLO, "sampling_params": {"temperature": 1.0, "max_new_tokens": 6}}
        model = ToyModel()
        first = [model.generate(body)[0]["output_ids"] for _ in range(8)]
        self.assertEqual(len({tuple(ids) for ids in first}), 8)
        # Another prompt in between takes its own draws and leaves this prompt's count alone.
        model.reset_draws()
        again = []
        for _ in range(8):
            model.generate({"input_ids": [5, 6], "sampling_params": body["sampling_params"]})
            again.append(model.generate(body)[0]["output_ids"])
        self.assertEqual(again, first)
        # Draw 1's key by hand: seed_part = mix(DRAW_SALT, 1) in place of NO_SEED.
        sample = model._samples(body)[0]
        sample.draw = 1
        prompt_hash = PROMPT_HASH_START
        for token in HELLO:
            prompt_hash = mix(prompt_hash, token)
        self.assertEqual(model._sample_key(sample), mix(mix(mix(0, prompt_hash), mix(0x44524157, 1)), 0))
        seeded = dict(body, sampling_params=dict(body["sampling_params"], sampling_seed=3))
        self.assertEqual(len({tuple(model.generate(seeded)[0]["output_ids"]) for _ in range(4)}), 1)
        deterministic = ToyModel(deterministic_inference=True)
        self.assertEqual(len({tuple(deterministic.generate(body)[0]["output_ids"]) for _ in range(4)}), 1)

    def test_prompt_shapes(self):
        # Section 8.1: text decides the shape, input_ids supplies the ids.
        model = ToyModel()
        params = {"max_new_tokens": 2}
        [alone] = model.generate({"input_ids": HELLO[:2], "sampling_params": params})
        self.assertEqual(alone["output_ids"], [132142, 59])
        for body in [{"text": "", "input_ids": HELLO[:2]}, {"text": ["ba"], "input_ids": [HELLO[:2], [-1]]}]:
            model.reset_draws()  # a first draw, as `alone` was (section 8.3)
            self.assertEqual(model.generate(dict(body, sampling_params=params)), [alone])
        self.assertEqual(model.generate({"text": [], "input_ids": [[5]], "sampling_params": params}), [])
        for body in [{"text": ["ba", "be"], "input_ids": HELLO[:2]}, {"text": "ba", "input_ids": [HELLO[:2], [5]]},
                     {"text": ["ba", "be"], "input_ids": [HELLO[:2]]}, {"text": ["ba"], "input_ids": []}]:
            with self.assertRaises(ValueError):
                model.generate(dict(body, sampling_params=params))
        with self.assertRaisesRegex(ValueError, r"^input_ids cannot be empty\.$"):
            model.generate({"text": "ba", "input_ids": [], "sampling_params": params})

    def test_sampling_mask_is_in_probability_order(self):
        # Section 7.1: the support of the worked example under top_k = 12, most probable first, not by id.
        [sample] = ToyModel().generate({"input_ids": HELLO, "return_sampling_mask": True,
                                        "sampling_logprobs_mode": "support",
                                        "sampling_params": {"max_new_tokens": 1, "top_k": 12, "temperature": 0.7}})
        self.assertEqual(sample["output_token_sampling_mask"],
                         [[33, 5794, 37060, 50244, 65720, 93668, 110106, 126853, 151935, 0, 1, 2]])


class DetokenizerTest(unittest.TestCase):
    """Section 13.4's helpers, on cases worked by hand from SGLang's `find_printable_text` and scheduler."""

    def test_printable_text(self):
        for text, printable in [("hello wor", "hello "), ("line\n", "line\n"), ("nospace", ""), ("", ""),
                                ("ab 中文", "ab 中文"), ("ab 中x", "ab 中"), ("a b\ufffd", "a "), ("中\ufffd", "中"),
                                ("𠀀", "𠀀"), ("x 가", "x ")]:
            self.assertEqual(find_printable_text(text), printable, text)

    def test_chunk_schedule(self):
        # Interval 1: every length; interval k > 1: lengths 1, 1 + k, 1 + 2k, ...
        self.assertEqual([n for n in range(1, 12) if chunk_due(n, 1)], list(range(1, 12)))
        self.assertEqual([n for n in range(1, 12) if chunk_due(n, 3)], [1, 4, 7, 10])


if __name__ == "__main__":
    unittest.main()
