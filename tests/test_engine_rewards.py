"""Rule rewards on crafted strings: correct, wrong, missing, badly ordered tags (MindSpeed-RL semantics)."""

import pytest

from grpo.engine import rewards

GOOD = "<think>7+8=15</think><answer>\\boxed{85}</answer>"


@pytest.mark.parametrize("text, expected", [
    (GOOD, 1.0),                                                    # correct, boxed
    ("<think>x</think><answer>\\boxed{84}</answer>", -0.5),         # wrong
    ("<think>x</think><answer>85</answer>", 1.0),                   # no box: the <answer> content counts
    ("<think>x</think><answer>86</answer>", -0.5),
    ("the sum is 85", -1.0),                                        # no answer at all
    ("<answer>\\boxed{85.0}</answer>", 1.0),                        # numeric comparison
    ("\\boxed{80} then \\boxed{85}", 1.0),                          # the last box wins
    ("<answer>\\boxed{}</answer>", -1.0),                           # empty answer
    ("<answer>\\boxed{85</answer>", -0.5),    # unbalanced box: the <answer> text "\\boxed{85" is wrong
])
def test_acc(text, expected):
    assert rewards.acc(text, "85") == expected


@pytest.mark.parametrize("text, expected", [
    (GOOD, 1.0),
    ("<think>a</think> <answer>so \\boxed{85} it is</answer>", 1.0),   # text around the box is fine
    ("<answer>\\boxed{85}</answer><think>a</think>", -0.5),          # badly ordered
    ("<think>a</think><answer>85</answer>", -0.5),                  # no box
    ("<think>a</think><answer>\\boxed{85}</answer> extra", -0.5),    # does not end with </answer>
    (" <think>a</think><answer>\\boxed{85}</answer>", -0.5),         # does not start with <think>
    ("<think>a</think><think>b</think><answer>\\boxed{85}</answer>", -0.5),  # two think blocks
    ("<think>a</think><answer>\\boxed{8}\\boxed{5}</answer>", -0.5),  # two boxes
    ("<think>a<answer></think>\\boxed{85}</answer>", -0.5),          # answer opens inside think
])
def test_strict_format(text, expected):
    assert rewards.strict_format(text) == expected


@pytest.mark.parametrize("text, expected", [
    (GOOD, 1.0),
    ("<think>a</think>\n <answer>anything</answer>", 1.0),
    ("<think>a</think>x<answer>b</answer>", 0.0),                   # only whitespace between the blocks
    ("<answer>b</answer>", 0.0),
    ("<think>a</think><answer>b</answer>!", 0.0),
])
def test_format(text, expected):
    assert rewards.format_(text) == expected


@pytest.mark.parametrize("text, expected", [
    (GOOD, 1.0),
    ("<think>7+8=15</think><answer>\\boxed{84}</answer>", 0.0),     # wrong answer
    ("<answer>\\boxed{85}</answer>", 0.0),                          # right answer, no think: format fails
    ("<think>a</think><answer>85</answer>", 0.0),                   # no box
])
def test_base_acc(text, expected):
    assert rewards.base_acc(text, "85") == expected


def test_math_17k_acc():
    assert rewards.math_17k_acc("\\boxed{85}", "85") == 1.0
    assert rewards.math_17k_acc("<answer>85</answer>", "85") == 0.0
    assert rewards.math_17k_acc("\\boxed{1/2}", "0.5") == 1.0


@pytest.mark.parametrize("text, expected", [
    ("Step 1: add. Step 2: carry. Step 3: done.", 1.0),
    ("First, add the units.", pytest.approx(1 / 3)),
    ("1. units\n- tens", pytest.approx(2 / 3)),
    ("just 85", 0.0),
])
def test_step(text, expected):
    assert rewards.step(text) == expected


def test_weighted_sum_and_per_verifier_scores():
    texts = [GOOD, "<think>x</think><answer>\\boxed{1}</answer>", "nothing"]
    totals, per = rewards.score(texts, ["85", "85", "85"], ["acc", "strict_format"], [1.0, 0.5])
    assert per["acc"] == [1.0, -0.5, -1.0]
    assert per["strict_format"] == [1.0, 1.0, -0.5]
    assert totals == [1.5, 0.0, -1.25]


def test_unknown_verifier_is_never_skipped():
    with pytest.raises(ValueError, match="unknown verifier_function"):
        rewards.score(["x"], ["1"], ["acc", "nope"], [1.0, 1.0])
