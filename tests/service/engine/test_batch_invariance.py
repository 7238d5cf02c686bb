"""A sentence gets the same tokens and scores whatever it is batched with (issue 16), for every
shipped bundle: decoded alone, then in one batch with sentences of other lengths, greedy and beam
4, and when it joins a batch that is already decoding. Exactly equal, not within a tolerance: the
graphs quantize each row with its own scale (export/invariant_quant.py), the service pads every
source and cache width to a multiple of 8, where onnxruntime's one-row MatMul kernels sum a row
alike at any width (test_one_row_kernels.py), and a Transformer row writes its own slots of the KV
cache, so no value of a row depends on another.
Skipped while bundles/ holds no bundle."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine.bundle import load_bundle
from service.engine.search import Hypothesis
from service.engine.translator import Translator
from service.settings import DEFAULT_BUNDLES

SHIPPED = sorted(p.parent.name for p in DEFAULT_BUNDLES.glob("*/manifest.json")) if DEFAULT_BUNDLES.is_dir() else []
pytestmark = pytest.mark.skipif(not SHIPPED, reason="no default bundles committed yet")

# 24 sentences each, 2 to 40-odd tokens: short and long ones share a batch, and their source
# lengths fall on every remainder mod 4 (the one-row MatMul kernel rounds K % 4 == 3 apart: the
# service's padding to multiples of 8 is what keeps them exact).
SENTENCES = {
    "en": [
        "Hi.",
        "Tom left.",
        "I'm hungry.",
        "Where is the station?",
        "Tom chases Jerry.",
        "She bought three apples yesterday.",
        "Can you help me carry these boxes upstairs?",
        "My brother lives in Shanghai with his wife and two children.",
        "Please close the window.",
        "It has been raining since Monday morning, and the river is rising.",
        "What time does the library open on Sundays?",
        "I don't think Mary will come to the party tonight.",
        "The doctor told him to stop smoking and to walk every day.",
        "Thank you!",
        "We missed the last train, so we had to take a taxi home.",
        "Do you know how to say this in Chinese?",
        "He reads a newspaper every morning before he goes to work.",
        "This is the most beautiful city I have ever visited, and I want to come back next summer "
        "with my whole family.",
        "Tom and Mary got married in October.",
        "Why?",
        "The teacher asked the students to write a short story about their summer holidays.",
        "I forgot my umbrella at the restaurant.",
        "Let's meet at the coffee shop near the bank at three o'clock.",
        "Nobody knows where he went after the meeting ended.",
    ],
    "zh": [
        "你好。",
        "汤姆走了。",
        "我饿了。",
        "车站在哪里？",
        "汤姆追杰瑞。",
        "她昨天买了三个苹果。",
        "你能帮我把这些箱子搬上楼吗？",
        "我哥哥和他的妻子还有两个孩子住在上海。",
        "请关窗。",
        "从星期一早上开始一直在下雨，河水在上涨。",
        "图书馆星期天几点开门？",
        "我觉得玛丽今晚不会来参加聚会。",
        "医生叫他戒烟，每天散步。",
        "谢谢！",
        "我们错过了最后一班火车，只好坐出租车回家。",
        "你知道这个用中文怎么说吗？",
        "他每天早上上班前都看报纸。",
        "这是我去过的最美丽的城市，明年夏天我想和全家人一起再来。",
        "汤姆和玛丽十月结婚了。",
        "为什么？",
        "老师让学生们写一篇关于暑假的短篇故事。",
        "我把伞忘在餐厅了。",
        "我们三点在银行附近的咖啡店见面吧。",
        "会议结束后没人知道他去了哪里。",
    ],
}


@pytest.fixture(scope="module", params=SHIPPED)
def translator(request: pytest.FixtureRequest) -> Translator:
    return Translator(load_bundle(DEFAULT_BUNDLES / request.param))


def alone_and_batched(translator: Translator, beam: int) -> list[tuple[Hypothesis, Hypothesis]]:
    src_ids = translator.source_ids(SENTENCES[translator.manifest.source_lang])
    options = translator.options(beam_size=beam)
    alone = [translator.search_ids([ids], options)[0][0] for ids in src_ids]
    batched = [nbest[0] for nbest in translator.search_ids(src_ids, options)]  # one batch, lengths mixed
    return list(zip(alone, batched, strict=True))


def test_the_sentences_mix_lengths(translator: Translator) -> None:
    lengths = [len(ids) for ids in translator.source_ids(SENTENCES[translator.manifest.source_lang])]
    assert {n % 4 for n in lengths} == {0, 1, 2, 3} and max(lengths) >= 3 * min(lengths)


@pytest.mark.parametrize("beam", [1, 4])
def test_a_sentence_decodes_the_same_alone_and_in_a_mixed_batch(translator: Translator, beam: int) -> None:
    for alone, batched in alone_and_batched(translator, beam):
        assert batched.tokens == alone.tokens
        assert batched.token_log_probs == alone.token_log_probs  # exactly
        assert batched.score == alone.score


@pytest.mark.parametrize(("first", "second"), [(1, 4), (4, 1)])
def test_a_sentence_decodes_the_same_when_it_joins_a_running_batch(
    translator: Translator, first: int, second: int
) -> None:
    """Continuous batching: half the sentences decode for a few steps, then the other half (other
    search options, other lengths) join the running batch mid-decode; each part as if alone."""
    by_length = sorted(translator.source_ids(SENTENCES[translator.manifest.source_lang]), key=len, reverse=True)
    src_ids = by_length[::2] + by_length[1::2]  # both halves mix lengths; the longest decodes first
    half = len(src_ids) // 2
    options = [translator.options(beam_size=first)] * half + [translator.options(beam_size=second)] * half
    alone = [translator.search_ids([ids], o)[0][0] for ids, o in zip(src_ids, options, strict=True)]
    longest = max(len(h.tokens) for h in alone[:half])
    for steps_before in (1, 5, longest - 2):  # the last: late, the cache grown past a chunk where outputs are long
        cohort = translator.begin(src_ids[:half], options[0])
        found: dict[int, Hypothesis] = {}
        for _ in range(steps_before):
            found |= {s: nbest[0] for s, nbest in cohort.step()}
        assert not cohort.done  # the longest sentence is still decoding
        assert cohort.join(translator.begin(src_ids[half:], options[-1])) == half
        while not cohort.done:
            found |= {s: nbest[0] for s, nbest in cohort.step()}
        for i, expected in enumerate(alone):
            joined = found[i]
            width = expected.attention.shape[-1]
            assert (joined.tokens, joined.token_log_probs, joined.score) == (
                expected.tokens,
                expected.token_log_probs,
                expected.score,
            ), (steps_before, i)
            assert np.array_equal(joined.attention[..., :width], expected.attention)
            assert not joined.attention[..., width:].any()  # padding's columns are exactly 0


def test_the_manifest_says_so(translator: Translator) -> None:
    assert translator.manifest.quantization.batch_invariant is True
