// The baseline accel-host's framework overhead is measured against: the same
// GPT-2 model and training step written the way a LibTorch user would write it
// without Accel — torch::nn modules, torch::optim::AdamW with two parameter
// groups, torch::nn::utils::clip_grad_norm_ — and nothing else.
//
// Model: learned positions, pre-LayerNorm blocks, causal multi-head attention
// (scaled_dot_product_attention), tanh-GELU MLP of 4x width, final LayerNorm,
// head tied to the token embedding (host/model/gpt.h describes the same).
// One timed step: zero_grad, forward + loss, backward, clip to norm 1.0, AdamW
// step, read the loss (accel-host reads it too). Random tokens for every step
// are generated before the clock starts, so data loading costs nothing here.
//
// Prints one JSON line: tokens_per_s and ms_per_step are MEDIANS over the
// timed steps (the --warmup-steps before them are run but not timed); the
// means are printed beside them for reference.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// ---------------------------------------------------------------------------
// Command line

struct BenchOptions {
  int64_t n_layer = 2, n_head = 4, n_embd = 64, seq_len = 64, vocab_size = 256;
  int64_t batch_size = 8, steps = 20, warmup_steps = 3, threads = 0, seed = 1234;
  double lr = 1e-3, weight_decay = 0.1, grad_clip = 1.0;
};

BenchOptions parse_options(int argc, char** argv) {
  BenchOptions o;
  const std::map<std::string, int64_t*> integers = {
      {"--n-layer", &o.n_layer},       {"--n-head", &o.n_head},         {"--n-embd", &o.n_embd},
      {"--seq-len", &o.seq_len},       {"--vocab-size", &o.vocab_size}, {"--batch-size", &o.batch_size},
      {"--steps", &o.steps},           {"--warmup-steps", &o.warmup_steps},
      {"--threads", &o.threads},       {"--seed", &o.seed}};
  const std::map<std::string, double*> reals = {
      {"--lr", &o.lr}, {"--weight-decay", &o.weight_decay}, {"--grad-clip", &o.grad_clip}};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    const std::string value = argv[++i];
    if (auto it = integers.find(flag); it != integers.end()) {
      *it->second = std::stoll(value);
    } else if (auto jt = reals.find(flag); jt != reals.end()) {
      *jt->second = std::stod(value);
    } else {
      throw std::invalid_argument("unknown option " + flag);
    }
  }
  if (o.steps < 1 || o.warmup_steps < 0 || o.batch_size < 1 || o.n_embd % o.n_head != 0) {
    throw std::invalid_argument("need --steps >= 1, --warmup-steps >= 0, --batch-size >= 1, n_embd % n_head == 0");
  }
  return o;
}

// ---------------------------------------------------------------------------
// Model

struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t n_embd, int64_t n_head)
      : n_head(n_head),
        ln_1(register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({n_embd})))),
        c_attn(register_module("c_attn", torch::nn::Linear(n_embd, 3 * n_embd))),
        attn_proj(register_module("attn_proj", torch::nn::Linear(n_embd, n_embd))),
        ln_2(register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({n_embd})))),
        c_fc(register_module("c_fc", torch::nn::Linear(n_embd, 4 * n_embd))),
        mlp_proj(register_module("mlp_proj", torch::nn::Linear(4 * n_embd, n_embd))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    auto qkv = c_attn(ln_1(x)).split(C, /*dim=*/2);
    auto heads = [&](const torch::Tensor& t) { return t.view({B, T, n_head, C / n_head}).transpose(1, 2); };
    torch::Tensor y = torch::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]),
                                                          /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                          /*is_causal=*/true);
    torch::Tensor out = x + attn_proj(y.transpose(1, 2).reshape({B, T, C}));
    return out + mlp_proj(torch::gelu(c_fc(ln_2(out)), "tanh"));
  }

  int64_t n_head;
  torch::nn::LayerNorm ln_1;
  torch::nn::Linear c_attn, attn_proj;
  torch::nn::LayerNorm ln_2;
  torch::nn::Linear c_fc, mlp_proj;
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const BenchOptions& o)
      : wte(register_module("wte", torch::nn::Embedding(o.vocab_size, o.n_embd))),
        wpe(register_module("wpe", torch::nn::Embedding(o.seq_len, o.n_embd))),
        h(register_module("h", torch::nn::ModuleList())),
        ln_f(register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.n_embd})))) {
    for (int64_t i = 0; i < o.n_layer; ++i) h->push_back(Block(o.n_embd, o.n_head));
    // GPT-2's initialisation, so the numbers the kernels see resemble
    // accel-host's (no denormal or saturation effects in either).
    torch::NoGradGuard no_grad;
    for (auto& item : named_parameters()) {
      torch::Tensor& p = item.value();
      if (p.dim() >= 2) {
        p.normal_(0.0, 0.02);
      } else if (item.key().find("ln_") == std::string::npos) {
        p.zero_();  // biases; LayerNorm keeps weight 1, bias 0
      }
    }
  }

  // Mean next-token cross-entropy over all B*T positions.
  torch::Tensor forward(const torch::Tensor& idx, const torch::Tensor& targets) {
    const int64_t T = idx.size(1);
    torch::Tensor x = wte(idx) + wpe->weight.narrow(0, 0, T);
    for (const auto& block : *h) x = block->as<BlockImpl>()->forward(x);
    torch::Tensor logits = torch::nn::functional::linear(ln_f(x), wte->weight);  // tied head
    return torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}));
  }

  torch::nn::Embedding wte, wpe;
  torch::nn::ModuleList h;
  torch::nn::LayerNorm ln_f;
};
TORCH_MODULE(Gpt);

// AdamW with decay on weights and embeddings (dim >= 2), none on biases and
// LayerNorm parameters: the split accel-host and the Python reference use.
torch::optim::AdamW make_optimizer(Gpt& model, const BenchOptions& o) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const torch::Tensor& p : model->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto options = [&](double weight_decay) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(o.lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(weight_decay));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(o.weight_decay));
  groups.emplace_back(no_decay, options(0.0));
  return torch::optim::AdamW(groups, torch::optim::AdamWOptions(o.lr));
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

int run(const BenchOptions& o) {
  if (o.threads > 0) at::set_num_threads(static_cast<int>(o.threads));
  torch::manual_seed(static_cast<uint64_t>(o.seed));
  Gpt model(o);
  model->train();
  torch::optim::AdamW optimizer = make_optimizer(model, o);
  const std::vector<torch::Tensor> params = model->parameters();

  // Every step's batch, made before the clock starts: windows of seq_len + 1
  // tokens, inputs their first seq_len, targets their last seq_len.
  const int64_t total_steps = o.warmup_steps + o.steps;
  const torch::Tensor windows = torch::randint(o.vocab_size, {total_steps, o.batch_size, o.seq_len + 1}, torch::kLong);
  std::vector<torch::Tensor> inputs, targets;
  for (int64_t s = 0; s < total_steps; ++s) {
    inputs.push_back(windows[s].narrow(1, 0, o.seq_len).contiguous());
    targets.push_back(windows[s].narrow(1, 1, o.seq_len).contiguous());
  }

  std::vector<double> seconds;
  double loss = 0.0;
  for (int64_t s = 0; s < total_steps; ++s) {
    const auto start = std::chrono::steady_clock::now();
    optimizer.zero_grad();
    torch::Tensor loss_tensor = model->forward(inputs[s], targets[s]);
    loss_tensor.backward();
    torch::nn::utils::clip_grad_norm_(params, o.grad_clip);
    optimizer.step();
    loss = loss_tensor.item<double>();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s >= o.warmup_steps) seconds.push_back(elapsed);
  }

  const double tokens_per_step = static_cast<double>(o.batch_size * o.seq_len);
  const double median_s = median(seconds);
  const double mean_s = std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(seconds.size());
  int64_t num_params = 0;
  for (const torch::Tensor& p : params) num_params += p.numel();
  std::printf(
      "{\"contender\": \"plain-libtorch\", \"statistic\": \"median\", \"tokens_per_s\": %.3f, "
      "\"ms_per_step\": %.4f, \"mean_tokens_per_s\": %.3f, \"mean_ms_per_step\": %.4f, "
      "\"timed_steps\": %lld, \"warmup_steps\": %lld, \"batch_size\": %lld, \"seq_len\": %lld, "
      "\"threads\": %d, \"parameters\": %lld, \"final_loss\": %.6f}\n",
      tokens_per_step / median_s, 1e3 * median_s, tokens_per_step / mean_s, 1e3 * mean_s,
      static_cast<long long>(o.steps), static_cast<long long>(o.warmup_steps),
      static_cast<long long>(o.batch_size), static_cast<long long>(o.seq_len), at::get_num_threads(),
      static_cast<long long>(num_params), loss);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  BenchOptions options;
  try {
    options = parse_options(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_plain_libtorch_gpt: %s\n", e.what());
    return 2;
  }
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_plain_libtorch_gpt: %s\n", e.what());
    return 1;
  }
}
