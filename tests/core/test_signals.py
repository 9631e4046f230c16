"""Format-free training signals (app/core/signals.py): a non-finite loss, the step it happened at,
the last healthy step and the last progress of a trainer no filter rule knows, in every layout,
with the C scan loop and the pure-Python loop giving the same answer."""

from __future__ import annotations

import io
import math

import pytest

from app.core import ablation, compress as compress_mod
from app.core.compress import ShapeTable, compress_source
from app.core.pipeline import Pipeline
from app.core.signals import SignalReader, counter_kind, loss_kind, nonfinite_reading, step_of


def read(lines: list[str]):
    """The reading of the last line, after the reader saw the ones before it (a table header)."""
    reader = SignalReader()
    sig = None
    for line in lines:
        sig = reader.classify(line)
    return None if sig is None else (sig, sig.read(lines[-1]))


# ---- the parser, per layout (each with lines of at least two emitters) ----------------------

@pytest.mark.parametrize("line, step, values", [
    # key: value (mmengine, MaxText)
    ("mmengine - INFO - Iter(train) [  50/1000]  lr: 1.0000e-02  eta: 0:01:00  time: 0.1000  loss: 2.3000  grad_norm: 0.5000",
     50, {"loss": 2.3, "grad_norm": 0.5}),
    ("completed step: 120, seconds: 1.234, TFLOP/s/device: 123.4, Tokens/s/device: 1234.5, total_weights: 12345, loss: 2.310",
     120, {"loss": 2.31}),
    # key=value (fairseq train_inner, a Lightning bar's postfix)
    ("2020-03-23 11:39:44 | INFO | train_inner | epoch 003:      5 / 356 loss=9.44, nll_loss=8.44, ppl=347.28, "
     "wps=30690.8, ups=0.07, num_updates=700, lr=0.000175, gnorm=156.036, loss_scale=0, train_wall=1281",
     700, {"loss": 9.44, "grad_norm": 156.036}),
    ("[trainer] global_step=4200 train/loss_step=1.875 lr=3e-4", 4200, {"loss": 1.875}),
    # 'key': value / "key": value (a Python dict, a JSON line)
    ("{'epoch': 1, 'iter': 300, 'train_loss': 2.1345, 'grad_norm': 1.2}", 300, {"loss": 2.1345, "grad_norm": 1.2}),
    ('{"step": 120, "train/loss": 2.31, "throughput": 12000.5}', 120, {"loss": 2.31}),
    # key value (fairseq's epoch summary, a plain logger)
    ("2020-03-23 11:38:13 | INFO | train | epoch 002 | loss 9.803 | nll_loss 8.89 | ppl 474.37 | num_updates 695 | gnorm 55.005",
     695, {"loss": 9.803, "grad_norm": 55.005}),
    ("Step 1200 lm loss 2.0312 grad norm 0.93", 1200, {"loss": 2.0312, "grad_norm": 0.93}),
    # PyTorch's examples: the bracket counts the epoch's samples (the first epoch's is the step)
    ("Train Epoch: 0 [640/60000 (1%)]\tLoss: 2.205", 640, {"loss": 2.205}),
])
def test_finite_pairs_give_step_and_values(line, step, values):
    sig, reading = read([line])
    assert sig.extract and sig.progress and not sig.nonfinite
    assert reading.step == step and reading.values == values and reading.progress


@pytest.mark.parametrize("line, step, key", [
    ("epoch: 3451 loss: nan", 3451, "loss"),  # epoch as the only counter
    ("epoch: 0|step: 3196|ppo_ep: 1|act_loss: inf|cri_loss: inf|unsuper_loss: 0.0", 3196, "loss"),  # DeepSpeed-Chat
    ("{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 1.9e-05, 'epoch': 0.5}", None, "grad_norm"),  # HF Trainer
    ('{"step": 121, "train/loss": Infinity}', 121, "loss"),  # json.dumps of inf
    ('{"step": 122, "loss": -Infinity, "grad_norm": NaN}', 122, "loss"),
    ("wandb:     loss nan", None, "loss"),  # W&B run summary
    ("loss tensor(nan, device='cuda:0', dtype=torch.float16, grad_fn=<MeanBackward0>)", None, "loss"),
    # (a Lightning bar counts batches of the epoch: no global step)
    ("Epoch 3: 45%|####5     | 450/1000 [01:23<01:42, 5.37it/s, v_num=0, train_loss=inf]", None, "loss"),
    ("it=120 | lm_loss=NaN | gnorm 0.8", 120, "loss"),
    ("iter 120/1000 ppl INF", 120, "loss"),
    ("[batch=77/5000]: Train loss/train/total: nan", 77, "loss"),  # composer-like, on one line
    # a sentence's full stop after the value (TensorFlow's NanTensorHook)
    ("E0526 15:34:12.011717 140569525946176 basic_session_run_hooks.py:760] Model diverged with loss = NaN.", None, "loss"),
    # prose joined by is/was (BigDL's DistriOptimizer), a bracketed key, terms of the loss
    ("[Epoch 76 1001728/1281167][Iteration 54399] Train 1792 in 4.2seconds. Loss is Infinity. Current learning rate is 0.03",
     54399, "loss"),
    ("| E6 iter[ 14/ 15] | [Loss] nan | [exp] ./exp/run1 | [step]   104 | [time] 0.4m", 104, "loss"),
    ("iter 4500   time/iter: 0.49  lr: 0.000100 loss_mn: nan loss_c: nan   loss_mse: nan", 4500, "loss"),
    ("Epoch [3][120/500]\tlr: 1.0e-02, loss_rpn_cls: nan, loss_bbox: 0.31", None, "loss"),
    # a camelCase key (MXNet's Speedometer prints the metric's own name), a two-word key in prose
    ("2021-08-12 05:44:07,141 Epoch[1] Batch[7] Speed: 143.86 samples/sec,  IDLoss=nan,", None, "loss"),
    ("[user] 2021-04-23 19:22:52,420 (trainer:581) WARNING: The grad norm is nan. Skipping updating the model.",
     None, "grad_norm"),
    # a key joined to its value by `is not finite:` (verl's FSDP workers under Ray)
    ("(WorkerDict pid=9092) WARN: grad_norm is not finite: nan", None, "grad_norm"),
    ("step 12 | loss is non-finite: inf", 12, "loss"),
    # a key/value table's row (OpenAI baselines' logger dump, as guided/improved diffusion print it)
    ("| loss          | nan       |", None, "loss"),
    ("│ grad_norm │ inf │", None, "grad_norm"),
])
def test_non_finite_values_in_every_pair_layout(line, step, key):
    sig, reading = read([line])
    assert sig.nonfinite and not sig.progress
    assert reading.nonfinite and reading.step == step and not math.isfinite(reading.values[key])
    assert nonfinite_reading(line) is not None


@pytest.mark.parametrize("lines, step, values", [
    (["| step | loss | grad_norm |", "|------|------|-----------|", "| 120 | 2.31 | 0.9 |"], 120, {"loss": 2.31, "grad_norm": 0.9}),
    (["┃ Step ┃ Train Loss ┃ LR     ┃", "│  120 │   2.31     │ 1e-4   │"], 120, {"loss": 2.31}),
    (["   step      loss       lr", "    120    2.3100   1e-4"], 120, {"loss": 2.31}),
    (["| epoch | batch | loss |", "| 0 | 40 | 1.5 |"], 40, {"loss": 1.5}),
])
def test_table_rows_are_read_under_their_header(lines, step, values):
    sig, reading = read(lines)
    assert sig.header is not None and sig.extract and sig.progress
    assert reading.step == step and reading.values == values


@pytest.mark.parametrize("lines", [
    ["| step | loss | grad_norm |", "| 121 | nan | nan |"],
    ["┃ Step ┃ Train Loss ┃ LR     ┃", "│  121 │   NaN      │ 1e-4   │"],
    ["   step      loss       lr", "    121       inf   1e-4"],
])
def test_a_non_finite_table_cell_is_found(lines):
    sig, reading = read(lines)
    assert sig.nonfinite and reading.step == 121 and not math.isfinite(reading.values["loss"])


@pytest.mark.parametrize("line", [
    "best loss: inf",  # an initial value
    "loss_scale: inf",  # a loss scale is no loss
    " iteration        3/  100000 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "Using nanoGPT-style init; inference mode off",
    "| step | loss |",  # a header, not a row
    "| loss_scale    | nan       |",  # a key/value row of no loss
    "loss 1.2.3",  # a version's second dot is no full stop
    "loss: nan.5",
    "Loss of connection to nan-03 after 5 retries",  # a term needs a value after its key
    "the loss is not finite: check the data",  # `is not finite` needs a non-finite value after it
    "Warning: loss_scale is not finite: nan, reducing",  # a loss scale is no loss
])
def test_lines_without_a_non_finite_loss(line):
    assert nonfinite_reading(line) is None


@pytest.mark.parametrize("line, progress", [
    ("Saving checkpoint at step 1000 to /ckpt/step-1000", False),  # a counter alone is no step
    ("iter 120/1000", True),  # a counter with its total
    ("[batch=120/5000]:", True),
    ("Training:  12%|#2        | 120/1000 [00:10<01:20, 11.0it/s]", True),  # a bar
    ("Training Epoch 14:   0% 0/101 [00:00<?, ?it/s]", False),  # no step done yet
    ("Epoch 3 batch 40 loss 2.3", True),
    ("it is 5 past 10", False),  # `it` is a counter only as it=/it:
])
def test_what_counts_as_progress(line, progress):
    reading = SignalReader().classify(line)
    assert (reading is not None and reading.progress) == progress


def test_key_kinds():
    assert [loss_kind(k) for k in ("lm loss", "train_loss", "act_loss", "loss_step", "grad norm", "gnorm",
                                   "val_loss", "ppl", "loss_scale", "best_loss", "lr", "loss_cls", "losses",
                                   "Loss is", "val_loss_cls", "loss_weight")] == \
        ["loss", "loss", "loss", "loss", "grad_norm", "grad_norm", "eval", "ppl", None, None, None, "part", "loss",
         "loss", None, None]
    assert [counter_kind(k) for k in ("step", "global_step", "iteration", "num_updates", "epoch", "batch",
                                      "max_steps", "warmup_steps", "time/step")] == \
        ["step", "step", "step", "step", "epoch", "batch", None, None, None]
    assert counter_kind("it", "=") == "step" and counter_kind("it", " ") is None
    assert [loss_kind(k) for k in ("IDLoss", "trainLoss", "gradNorm", "ValLoss", "lossScale", "BestLoss")] == \
        ["loss", "loss", "grad_norm", "eval", None, None]


def test_an_epoch_stands_in_for_the_step_only_where_asked():
    assert step_of("epoch: 7 loss: 1.0") == 7 and step_of("epoch: 7 loss: 1.0", epochs=False) is None


# ---- the compressor: an unknown trainer's log, on both scan loops ----------------------------

def unknown_trainer(steps: int, *, nan_at: int = 0, table: bool = False, prefix: str = "") -> str:
    """A trainer no filter rule knows: `it=N | lm_loss=X | gnorm Y | tok/s=Z`, or a markdown
    table; a checkpoint line every 50 steps, NaN from `nan_at` on."""
    out = ["| it | train loss | grad norm | tok/s |", "|----|------------|-----------|-------|"] if table else []
    for it in range(1, steps + 1):
        bad = nan_at and it >= nan_at
        loss = "nan" if bad else f"{3 - it / (2 * steps):.4f}"
        gnorm = "nan" if bad else f"{0.8 + (it % 7) / 10:.3f}"
        if table:
            out.append(f"| {it} | {loss} | {gnorm} | {12000 + it % 100} |")
        else:
            out.append(f"{prefix}2025-01-01 10:{it // 60 % 60:02d}:{it % 60:02d} trainer INFO | it={it} | "
                       f"lm_loss={loss} | gnorm {gnorm} | tok/s={12000 + it % 100}")
        if it % 50 == 0:
            out.append(f"{prefix}2025-01-01 10:00:00 trainer INFO | wrote ckpt /ckpt/it{it}")
    return "\n".join(out) + "\n"


def _both_loops(data: bytes, ruleset, **kwargs):
    if ShapeTable is None:
        pytest.skip("C scan loop not built")
    return [compress_source(io.BytesIO(data), ruleset, use_c=c, **kwargs) for c in (True, False)]


@pytest.mark.parametrize("table", [False, True])
@pytest.mark.parametrize("chunk_size", [4096, 1 << 20])
def test_c_and_python_loops_agree_on_an_unknown_trainer(ruleset, table, chunk_size):
    data = unknown_trainer(3000, nan_at=2345, table=table).encode()
    fast, pure = _both_loops(data, ruleset, chunk_size=chunk_size)
    assert fast.text == pure.text
    assert fast.stats.to_json_dict() == pure.stats.to_json_dict()
    assert fast.last_progress == pure.last_progress
    assert fast.recent_progress == pure.recent_progress
    assert [(p.line, p.step) for p in fast.nan_points] == [(p.line, p.step) for p in pure.nan_points]
    assert fast.signal_shapes == pure.signal_shapes
    for log in (fast, pure):
        assert log.last_progress.step == 2344  # the NaN lines are no progress
        assert log.metrics and all(p.step is not None and p.step < 2345 for p in log.metrics)


def test_kept_signal_lines_are_sampled_by_the_c_loop_not_read_in_python(ruleset):
    if ShapeTable is None:
        pytest.skip("C scan loop not built")
    log = compress_source(io.BytesIO(unknown_trainer(50_000).encode()), ruleset, use_c=True, chunk_size=1 << 20)
    # a sample, spread over the log, from a few lines per chunk
    assert 64 <= len(log.metrics) < 5_000
    assert log.metrics[-1].step > 45_000 and log.last_progress.step == 50_000


def test_parallel_ranges_find_the_same_signals(tmp_path, ruleset, monkeypatch):
    path = tmp_path / "big.log"
    path.write_text(unknown_trainer(40_000, nan_at=31_234))
    one = compress_source(path, ruleset, workers=1)
    monkeypatch.setattr(compress_mod, "PARALLEL_MIN_BYTES", 1)
    two = compress_source(path, ruleset, workers=2, chunk_size=256 * 1024)
    assert two.last_progress == one.last_progress
    assert [p.line for p in two.nan_points] == [p.line for p in one.nan_points]


def test_a_non_finite_value_on_a_dropped_metric_line_is_found(ruleset):
    """tqdm-bar drops the bar and reads its `loss=`; its `gnorm=nan` is read here."""
    bar = "{p}%|###       | {i}/1000 [00:{s:02d}<01:00, 5.00it/s, loss=2.{i:03d}, gnorm={g}]"
    lines = [bar.format(p=i // 10, i=i, s=i % 60, g="0.9") for i in range(1, 300)]
    lines += [bar.format(p=i // 10, i=i, s=i % 60, g="nan") for i in range(300, 310)]
    fast, pure = _both_loops(("\n".join(lines) + "\n").encode(), ruleset)
    for log in (fast, pure):
        assert log.stats.dropped_by_rule.get("tqdm-bar") == 309
        assert log.nan_points and log.nan_points[0].line == 300 and log.nan_points[0].step == 300


# ---- end to end: NaN onset, last good step, hang, completion --------------------------------

@pytest.fixture()
def no_signals(monkeypatch):
    monkeypatch.setenv("LOGDX_ABLATE", "signals")
    ablation._off.cache_clear()
    yield
    monkeypatch.delenv("LOGDX_ABLATE")
    ablation._off.cache_clear()


@pytest.fixture(scope="module")
def pipe():
    return Pipeline()


@pytest.mark.parametrize("table", [False, True])
def test_an_unknown_trainers_nan_has_its_exact_onset_and_last_good_step(pipe, tmp_path, table):
    path = tmp_path / "train.log"
    path.write_text(unknown_trainer(40_000, nan_at=23_457, table=table))
    d = pipe.diagnose(path, workers=1).diagnosis
    assert d.root_cause.error_type == "NaNLoss"
    assert (d.root_cause.last_good_step, d.root_cause.onset_step) == (23_456, 23_457)
    assert d.action.kind == "rollback_and_skip"  # well into the run: roll back, skip the window
    assert d.last_progress.step == 23_456


def test_without_signals_the_unknown_trainer_gives_no_onset(pipe, tmp_path, no_signals):
    path = tmp_path / "train.log"
    path.write_text(unknown_trainer(5_000, nan_at=2_345))
    d = Pipeline().diagnose(path, workers=1).diagnosis
    assert d.root_cause.last_good_step is None and d.last_progress is None


def test_an_unknown_trainer_that_stops_is_a_hang_with_its_last_step(pipe, tmp_path):
    path = tmp_path / "train.log"
    path.write_text(unknown_trainer(8_000, prefix="[rank0]: ") + "".join(
        f"[rank0]: 2025-01-01 12:{m:02d}:00 trainer INFO | heartbeat\n" for m in (0, 20, 40)))
    d = pipe.diagnose(path, workers=1).diagnosis
    assert d.root_cause.error_type == "Hang"
    assert d.last_progress.step == 8_000 and "step 8000" in d.root_cause.explanation


def test_an_excerpt_that_ends_on_a_format_free_step_shows_no_stall(pipe):
    """A stall must show (output after the last step that never advances); a pasted excerpt of
    healthy training ends on a step line, an inferred one or a filter rule's."""
    text = "".join(f"it={i} | loss={2 - i / 1000:.4f} | lr=1e-4\n" for i in range(1, 40))
    d = pipe.diagnose(io.BytesIO(text.encode())).diagnosis
    assert d.root_cause.error_type == "Unknown" and "step 39" in d.root_cause.explanation
    assert d.last_progress.step == 39
    known = "".join(f"iter {i}: loss {2 - i / 1000:.4f}, time 100.00ms, mfu 40.00%\n" for i in range(1, 40))
    assert pipe.diagnose(io.BytesIO(known.encode())).diagnosis.root_cause.error_type == "Unknown"


def test_an_unknown_trainer_that_finished_did_not_hang(pipe):
    """Completion is told by the completion rules (the trainer's own end-of-training line), not by
    a counter at its total: a job that hangs in shutdown after its last step is a hang."""
    text = "".join(f"it={i}/500 | loss={2 - i / 1000:.4f} | lr=1e-4\n" for i in range(1, 501))
    d = pipe.diagnose(io.BytesIO((text + "***** train metrics *****\n").encode())).diagnosis
    assert d.root_cause.error_type == "Unknown" and d.root_cause.explanation.startswith("no failure found")
    stuck = "12:00:00 saving /ckpt/final\n12:30:00 saving /ckpt/final: waiting for the writer\n"
    d = pipe.diagnose(io.BytesIO((text + stuck).encode())).diagnosis
    assert d.root_cause.error_type == "Hang"


@pytest.mark.parametrize("line, values", [
    # an eval loss leads: the line's other loss terms are the evaluation's, no training point
    ("Epoch 0/1, Iter 6090/6174, test loss = 32.119, depth loss = 324.484, entropy loss = 32.119, time = 0.15", {}),
    ("[eval] step 500 | val_loss: 2.91 | lm loss: 2.88 | ppl: 17.9", {}),
    # the training loss leads (Keras' epoch line): the validation terms after it change nothing
    ("Epoch 3/10 - 12s - loss: 0.5210 - accuracy: 0.81 - val_loss: 0.6100 - val_accuracy: 0.78", {"loss": 0.521}),
])
def test_an_evaluation_line_is_no_point_of_the_training_series(line, values):
    from app.core.signals import _pairs
    assert _pairs(line).values == values


def test_an_evaluations_loss_terms_are_no_loss_spike(pipe):
    """Training lines give `train loss`, an evaluation pass's lines `test loss` then larger terms
    of it (`depth loss`): compared with the training series they would read as a spike."""
    train = [f"Epoch 0/16, Iter {i}/27097, lr 0.0003, train loss = {19 - i / 10:.3f}, depth loss = {120 - i / 5:.3f}, "
             f"time = 0.65" for i in range(0, 400, 10)]
    test = [f"Epoch 0/1, Iter {i}/6174, test loss = 32.1, depth loss = {340 + i % 7:.3f}, time = 0.15"
            for i in range(6000, 6174, 10)]
    d = pipe.diagnose(io.BytesIO(("\n".join(train + test) + "\n").encode())).diagnosis
    assert d.root_cause.error_type == "Unknown"
    spiky = train + [f"Epoch 0/16, Iter {i}/27097, lr 0.0003, train loss = 95.0, depth loss = 300.0, time = 0.65"
                     for i in range(400, 600, 10)]
    d = pipe.diagnose(io.BytesIO(("\n".join(spiky) + "\n").encode())).diagnosis
    assert d.root_cause.error_type == "LossSpike"


def test_an_error_followed_by_unknown_trainer_steps_is_recovered(pipe):
    lines = [f"it={i} | loss={2 - i / 1000:.4f} | lr=1e-4" for i in range(1, 100)] + ["evaluating"]
    lines.insert(40, "ConnectionError: HTTPSConnectionPool(host='api.wandb.ai', port=443): Max retries exceeded")
    d = pipe.diagnose(io.BytesIO(("\n".join(lines) + "\n").encode())).diagnosis
    # training went on after the error (then the excerpt ends as an eval starts: no stall shown)
    assert d.root_cause.error_type == "Unknown" and d.last_progress.step == 99
    assert [(c.error_type, c.role) for c in d.co_occurring] == [("ConnectionError", "recovered")]


@pytest.mark.parametrize("template", [
    "2025-01-01 10:00:{s:02d} trainer INFO | it={i} | lm_loss={x:.4f} | gnorm {g:.3f} | tok/s={t}",
    "mmengine - INFO - Iter(train) [{i:>5}/100000]  lr: {g:.4e}  time: 0.1000  loss: {x:.4f}  grad_norm: {g:.4f}",
    "{{'epoch': 1, 'iter': {i}, 'train_loss': {x}, 'grad_norm': {g:.2e}}}",
    "Training: {s}%|##  | {i}/100000 [00:{s:02d}<01:00, 5.00it/s, train_loss={x:.3f}]",
    "epoch: {i} loss: {x}",
])
def test_a_shapes_positional_reading_equals_the_full_one(template):
    """Lines of a learned shape are read by position (the C loop samples them every chunk); the
    result is the pair regex's, whatever the digits."""
    import random

    from app.core.signals import _read_pairs

    rnd = random.Random(5)
    first = template.format(i=120, s=7, x=2.5, g=0.5, t=12345)
    sig = SignalReader().classify(first)
    assert sig.fast is not None
    for _ in range(300):
        line = template.format(i=rnd.randrange(1, 99999), s=rnd.randrange(60), x=rnd.uniform(0, 20),
                               g=rnd.uniform(0, 3), t=rnd.randrange(10**6))
        fast, full = sig.read(line), _read_pairs(line)
        assert (fast.step, fast.values, fast.progress) == (full.step, full.values, full.progress), line


def test_a_later_epochs_sample_counter_is_progress_not_the_epoch_again():
    """`Train Epoch: 3 [2700/246000 (18%)]`: the epoch stays 3 for a whole epoch; the bracket's
    sample counter moves, so each line is a step of its own (not `epoch 3` printed again)."""
    sig, reading = read(["Train Epoch: 3 [2700/246000 (18%)]\tLoss: 0.000002425569619"])
    assert sig.progress and reading.progress and not reading.epoch_step
    assert reading.values == {"loss": 2.425569619e-06}
