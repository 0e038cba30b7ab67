//===- Fuse.cpp - elementwise fusion -----------------------------------===//
//
// sharc-fuse: groups chains of elementwise ops into sharc.fusion ops for the
// code generator.  Ops are grouped greedily in reverse program order: an op
// joins the group of one of its users when its result has the group's
// iteration shape and the groups stay acyclic.  The block is then rebuilt in
// a topological order of the groups that keeps the original order wherever
// it can.  docs/passes.md describes the rule.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

#include <queue>

namespace sharc {
#define GEN_PASS_DEF_FUSE
#include "passes/Passes.h.inc"
} // namespace sharc

using namespace mlir;
using namespace sharc;

namespace {

/// A node of the dependence graph of the block: one op, or a group of
/// elementwise ops that becomes one sharc.fusion.
struct Node {
  /// Members, in reverse program order while grouping.
  SmallVector<Operation *> members;
  /// True for a group of elementwise ops (possibly of one op).
  bool elementwise = false;
  /// The iteration shape of an elementwise group.
  ArrayRef<int64_t> shape;
  /// Position of the last member: nodes are emitted in this order wherever
  /// the dependences allow.
  unsigned key = 0;
};

/// Groups the ops of one block and rebuilds the block with the groups as
/// sharc.fusion ops.
class Fuser {
public:
  Fuser(Block &block, bool singletons) : block(block), singletons(singletons) {}

  LogicalResult run();

private:
  /// The op of the block that is or contains `op`.
  Operation *inBlock(Operation *op) const {
    return block.findAncestorOpInBlock(*op);
  }
  /// Node of the user of `use`.
  unsigned userNode(OpOperand &use) const {
    return nodeOf.lookup(inBlock(use.getOwner()));
  }
  /// True when adding `op` to group `group` makes the node graph cyclic:
  /// some other node that reads `op` reaches `group`.
  bool createsCycle(Operation *op, unsigned group) const;
  /// Calls `fn` on every node that reads a result of a member of `node`
  /// (possibly `node` itself).
  template <typename Fn> void forEachSuccessor(unsigned node, Fn &&fn) const;
  /// Assigns every op of the block to a node.
  void group();
  /// A topological order of the nodes (terminator excluded) that follows
  /// the keys wherever the dependences allow; failure if the node graph is
  /// cyclic (an internal error).
  FailureOr<SmallVector<unsigned>> order() const;
  /// True when `node` becomes a sharc.fusion.
  bool becomesFusion(const Node &node) const {
    return node.elementwise && (node.members.size() > 1 || singletons);
  }
  /// Replaces the members of `node` by one sharc.fusion built at `builder`'s
  /// insertion point; records the constants it cloned in `cloned`.
  void buildFusion(Node &node, OpBuilder &builder,
                   llvm::SetVector<Operation *> &cloned);

  Block &block;
  bool singletons;
  DenseMap<Operation *, unsigned> position;
  DenseMap<Operation *, unsigned> nodeOf;
  std::vector<Node> nodes;
};

} // namespace

template <typename Fn>
void Fuser::forEachSuccessor(unsigned node, Fn &&fn) const {
  for (Operation *member : nodes[node].members)
    for (Value result : member->getResults())
      for (OpOperand &use : result.getUses())
        fn(userNode(use));
}

bool Fuser::createsCycle(Operation *op, unsigned group) const {
  // Members of every group come after `op`, so no node reaches `op`; a cycle
  // needs a path from `op` through another node into `group`.
  llvm::DenseSet<unsigned> seen;
  SmallVector<unsigned> worklist;
  for (OpOperand &use : op->getUses()) {
    unsigned node = userNode(use);
    if (node != group && seen.insert(node).second)
      worklist.push_back(node);
  }
  while (!worklist.empty()) {
    unsigned node = worklist.pop_back_val();
    bool found = false;
    forEachSuccessor(node, [&](unsigned next) {
      if (next == group)
        found = true;
      else if (seen.insert(next).second)
        worklist.push_back(next);
    });
    if (found)
      return true;
  }
  return false;
}

void Fuser::group() {
  for (auto [i, op] : llvm::enumerate(block))
    position[&op] = i;

  for (Operation &op : llvm::reverse(block)) {
    unsigned pos = position.lookup(&op);
    if (!isFusibleElementwiseOp(&op) || op.getNumResults() != 1) {
      nodeOf[&op] = nodes.size();
      nodes.push_back({{&op}, false, {}, pos});
      continue;
    }
    ArrayRef<int64_t> shape =
        cast<RankedTensorType>(op.getResult(0).getType()).getShape();

    // The users' nodes, by the position of the first user in each.
    SmallVector<Operation *> users;
    for (OpOperand &use : op.getUses())
      users.push_back(inBlock(use.getOwner()));
    llvm::sort(users, [&](Operation *a, Operation *b) {
      return position.lookup(a) < position.lookup(b);
    });
    SmallVector<unsigned> candidates;
    for (Operation *user : users) {
      unsigned node = nodeOf.lookup(user);
      if (!llvm::is_contained(candidates, node))
        candidates.push_back(node);
    }

    bool joined = false;
    for (unsigned node : candidates) {
      if (!nodes[node].elementwise || nodes[node].shape != shape ||
          createsCycle(&op, node))
        continue;
      nodes[node].members.push_back(&op);
      nodeOf[&op] = node;
      joined = true;
      break;
    }
    if (!joined) {
      nodeOf[&op] = nodes.size();
      nodes.push_back({{&op}, true, shape, pos});
    }
  }
  for (Node &node : nodes)
    llvm::sort(node.members, [&](Operation *a, Operation *b) {
      return position.lookup(a) < position.lookup(b);
    });
}

FailureOr<SmallVector<unsigned>> Fuser::order() const {
  Operation *terminator = block.mightHaveTerminator() ? &block.back() : nullptr;
  unsigned terminatorNode =
      terminator ? nodeOf.lookup(terminator) : unsigned(nodes.size());

  // Edges: definitions to uses (including uses in nested regions), and
  // between consecutive ops with side effects, whose order must not change.
  std::vector<SmallVector<unsigned>> successors(nodes.size());
  std::vector<unsigned> indegree(nodes.size(), 0);
  auto addEdge = [&](unsigned from, unsigned to) {
    if (from == to || to == terminatorNode ||
        llvm::is_contained(successors[from], to))
      return;
    successors[from].push_back(to);
    ++indegree[to];
  };
  std::optional<unsigned> lastEffect;
  for (Operation &op : block) {
    unsigned node = nodeOf.lookup(&op);
    op.walk([&](Operation *inner) {
      for (Value operand : inner->getOperands())
        if (Operation *def = operand.getDefiningOp())
          if (Operation *outer = inBlock(def))
            addEdge(nodeOf.lookup(outer), node);
    });
    if (&op != terminator && !isMemoryEffectFree(&op)) {
      if (lastEffect)
        addEdge(*lastEffect, node);
      lastEffect = node;
    }
  }

  using Entry = std::pair<unsigned, unsigned>; // key, node
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> ready;
  for (unsigned node = 0; node < nodes.size(); ++node)
    if (node != terminatorNode && indegree[node] == 0)
      ready.push({nodes[node].key, node});
  SmallVector<unsigned> result;
  while (!ready.empty()) {
    unsigned node = ready.top().second;
    ready.pop();
    result.push_back(node);
    for (unsigned next : successors[node])
      if (--indegree[next] == 0)
        ready.push({nodes[next].key, next});
  }
  if (result.size() + (terminator ? 1 : 0) != nodes.size())
    return failure();
  return result;
}

void Fuser::buildFusion(Node &node, OpBuilder &builder,
                        llvm::SetVector<Operation *> &cloned) {
  llvm::SmallPtrSet<Operation *, 8> members(node.members.begin(),
                                            node.members.end());
  auto isMember = [&](Operation *op) { return op && members.contains(op); };

  // Operands: values from outside other than fusion leaves (splat
  // constants, iotas), in order of
  // first use.
  llvm::SetVector<Value> inputs;
  for (Operation *member : node.members)
    for (Value operand : member->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (!isMember(def) && !(def && isFusionLeaf(def)))
        inputs.insert(operand);
    }
  // Results: values used outside the group, and unused values.
  SmallVector<Value> outputs;
  for (Operation *member : node.members)
    for (Value result : member->getResults())
      if (result.use_empty() ||
          llvm::any_of(result.getUses(), [&](OpOperand &use) {
            return !isMember(inBlock(use.getOwner()));
          }))
        outputs.push_back(result);

  SmallVector<Location> locs;
  for (Operation *member : node.members)
    locs.push_back(member->getLoc());
  Location loc = locs.size() == 1 ? locs.front()
                                  : FusedLoc::get(builder.getContext(), locs);
  auto fusion = FusionOp::create(builder, loc, ValueRange(outputs).getTypes(),
                                 inputs.getArrayRef());

  OpBuilder::InsertionGuard guard(builder);
  SmallVector<Location> argLocs;
  for (Value input : inputs)
    argLocs.push_back(input.getLoc());
  Block *body =
      builder.createBlock(&fusion.getBody(), {},
                          ValueRange(inputs.getArrayRef()).getTypes(), argLocs);
  IRMapping mapping;
  mapping.map(inputs.getArrayRef(), body->getArguments());
  for (Operation *member : node.members) {
    for (Value operand : member->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (mapping.contains(operand) || isMember(def))
        continue;
      assert(def && isFusionLeaf(def) && "unmapped operand of a fusion");
      mapping.map(operand, builder.clone(*def)->getResult(0));
      cloned.insert(def);
    }
    builder.clone(*member, mapping);
  }
  SmallVector<Value> yielded;
  for (Value output : outputs)
    yielded.push_back(mapping.lookup(output));
  YieldOp::create(builder, loc, yielded);

  for (auto [output, result] : llvm::zip(outputs, fusion.getResults()))
    output.replaceUsesWithIf(result, [&](OpOperand &use) {
      return !isMember(inBlock(use.getOwner()));
    });
  for (Operation *member : llvm::reverse(node.members)) {
    assert(member->use_empty() && "fused op still in use");
    member->erase();
  }
  node.members.assign({fusion});
}

LogicalResult Fuser::run() {
  if (block.empty())
    return success();
  group();
  FailureOr<SmallVector<unsigned>> sequence = order();
  if (failed(sequence))
    return block.getParentOp()->emitError()
           << "sharc-fuse: internal error: the groups depend on each other";

  // Rebuild the block in `sequence`, in front of the terminator.
  Operation *terminator = block.mightHaveTerminator() ? &block.back() : nullptr;
  Block::iterator end = terminator ? Block::iterator(terminator) : block.end();
  OpBuilder builder(&block, end);
  llvm::SetVector<Operation *> cloned;
  for (unsigned index : *sequence) {
    Node &node = nodes[index];
    if (becomesFusion(node)) {
      buildFusion(node, builder, cloned);
      continue;
    }
    for (Operation *member : node.members)
      member->moveBefore(&block, end);
  }
  // Splat constants and iotas that every reader now clones.
  for (Operation *constant : cloned)
    if (constant->use_empty())
      constant->erase();
  return success();
}

/// Drops a fusion result that its fusion users can recompute from what they
/// already read: a result computed by one add, sub, mul or neg whose operands
/// are splat constants or values every user already takes (another result of
/// the fusion, or one of its inputs), read only by fusions.  Each user clones
/// the op instead of loading the stored value, so the producer writes one
/// tensor less and the users read one less (the GELU forward stores x and
/// tanh; its backward recomputes x^2 and 1 + tanh).  The same ops on the same
/// values: results do not change.  Returns whether anything changed.
static bool rematerializeOnce(Block &block) {
  for (Operation &op : block) {
    auto fusion = dyn_cast<FusionOp>(op);
    if (!fusion || fusion->getNumResults() < 2 || !fusion->getAttrs().empty())
      continue;
    Block &body = fusion.getBody().front();
    Operation *yield = body.getTerminator();
    for (unsigned k = 0; k < fusion->getNumResults(); ++k) {
      Value result = fusion->getResult(k);
      Operation *def = yield->getOperand(k).getDefiningOp();
      if (result.use_empty() ||
          !isa_and_nonnull<AddOp, SubOp, MulOp, NegOp>(def))
        continue;
      // Where each operand of `def` comes from outside: a fusion input or
      // another result (null for a splat constant, cloned as it is).
      SmallVector<Value> sources;
      bool ok = true;
      for (Value operand : def->getOperands()) {
        if (auto arg = dyn_cast<BlockArgument>(operand)) {
          sources.push_back(fusion->getOperand(arg.getArgNumber()));
          continue;
        }
        Operation *inner = operand.getDefiningOp();
        if (inner && isFusionLeaf(inner)) {
          sources.push_back(Value());
          continue;
        }
        auto position = llvm::find(yield->getOperands(), operand);
        if (position == yield->operand_end() ||
            unsigned(position - yield->operand_begin()) == k) {
          ok = false;
          break;
        }
        sources.push_back(
            fusion->getResult(unsigned(position - yield->operand_begin())));
      }
      auto users = llvm::to_vector(result.getUsers());
      ok = ok && llvm::all_of(users, [&](Operation *user) {
             return isa<FusionOp>(user) && user->getBlock() == &block &&
                    llvm::all_of(sources, [&](Value source) {
                      return !source ||
                             llvm::is_contained(user->getOperands(), source);
                    });
           });
      if (!ok)
        continue;
      for (Operation *user : llvm::make_early_inc_range(users)) {
        if (user->getNumOperands() == 0 ||
            !llvm::is_contained(user->getOperands(), result))
          continue;
        Block &userBody = cast<FusionOp>(user).getBody().front();
        OpBuilder builder(&userBody, userBody.begin());
        IRMapping mapping;
        for (auto [operand, source] : llvm::zip(def->getOperands(), sources)) {
          if (!source) {
            mapping.map(operand,
                        builder.clone(*operand.getDefiningOp())->getResult(0));
            continue;
          }
          unsigned index =
              llvm::find(user->getOperands(), source) - user->operand_begin();
          mapping.map(operand, userBody.getArgument(index));
        }
        Value recomputed = builder.clone(*def, mapping)->getResult(0);
        for (unsigned i = user->getNumOperands(); i-- > 0;)
          if (user->getOperand(i) == result) {
            userBody.getArgument(i).replaceAllUsesWith(recomputed);
            user->eraseOperand(i);
            userBody.eraseArgument(i);
          }
      }
      // Rebuild the producer without result k.
      SmallVector<Type> types;
      for (Value other : fusion->getResults())
        if (other != result)
          types.push_back(other.getType());
      OpBuilder builder(fusion);
      auto rebuilt =
          FusionOp::create(builder, fusion.getLoc(), types, fusion.getInputs());
      rebuilt.getBody().takeBody(fusion.getBody());
      rebuilt.getBody().front().getTerminator()->eraseOperand(k);
      unsigned next = 0;
      for (Value other : fusion->getResults())
        if (other != result)
          other.replaceAllUsesWith(rebuilt->getResult(next++));
      fusion->erase();
      return true;
    }
  }
  return false;
}

/// Marks fusions that feed a row reduction as its prologue: a fusion with one
/// result, read only by a softmax, log_softmax, layer_norm or float reduce,
/// whose body is short (at most kMaxPrologueOps ops, since the row kernel
/// recomputes an element each time it reads it).  The code generator computes
/// it inside the row kernel, never storing it.
static void markRowPrologues(Block &block) {
  constexpr int64_t kMaxPrologueOps = 8;
  for (Operation &op : block) {
    auto fusion = dyn_cast<FusionOp>(op);
    if (!fusion || fusion->getNumResults() != 1 ||
        !fusion->getResult(0).hasOneUse())
      continue;
    Operation *user = *fusion->getResult(0).getUsers().begin();
    bool rowOp =
        isa<SoftmaxOp, LogSoftmaxOp, LayerNormOp>(user) ||
        (isa<ReduceOp>(user) &&
         isa<FloatType>(cast<RankedTensorType>(fusion->getResult(0).getType())
                            .getElementType()));
    if (!rowOp || user->getOperand(0) != fusion->getResult(0) ||
        user->getBlock() != &block)
      continue;
    int64_t ops = 0;
    for (Operation &inner : fusion.getBody().front().without_terminator())
      ops += !isFusionLeaf(&inner);
    if (ops <= kMaxPrologueOps)
      fusion->setAttr("sharc.fuse_into", UnitAttr::get(op.getContext()));
  }
}

SmallVector<Operation *> sharc::readSites(Operation *op, Block &block) {
  SmallVector<Operation *> sites;
  for (Operation *user : op->getUsers()) {
    Operation *top = block.findAncestorOpInBlock(*user);
    if (!top)
      continue;
    if (top->hasAttr("sharc.fuse_into"))
      llvm::append_range(sites, readSites(top, block));
    else
      sites.push_back(top);
  }
  return sites;
}

bool sharc::readFrom(Operation *op, Value value, Block &block, bool atOp) {
  return llvm::any_of(value.getUsers(), [&](Operation *user) {
    Operation *top = block.findAncestorOpInBlock(*user);
    if (!top)
      return false;
    SmallVector<Operation *> sites = {top};
    if (top->hasAttr("sharc.fuse_into"))
      sites = readSites(top, block);
    return llvm::any_of(sites, [&](Operation *site) {
      return (atOp && site == op) || (site != op && op->isBeforeInBlock(site));
    });
  });
}

bool sharc::canOverwrite(Operation *producer, Value old, Block &block) {
  if (!isa<FusionOp>(producer) || producer->getBlock() != &block ||
      producer->hasAttr("sharc.fuse_into") ||
      producer->hasAttr("sharc.gemm_epilogue") ||
      !llvm::is_contained(producer->getOperands(), old))
    return false;
  return !readFrom(producer, old, block, /*atOp=*/false);
}

/// The cuBLASLt epilogue activation `op` computes, if any: ReLU, or GELU
/// with the tanh approximation (cuBLASLt's GELU).
static std::optional<GemmActivation> epilogueActivation(Operation *op) {
  if (isa<ReluOp>(op))
    return GemmActivation::relu;
  if (auto gelu = dyn_cast<GeluOp>(op);
      gelu && gelu.getApproximation() == GeluApproximation::tanh)
    return GemmActivation::gelu_tanh;
  return std::nullopt;
}

/// Marks GEMM epilogues: `op` (a fusion, or a plain op) computes
/// act(matmul + bias), matmul + bias or act(matmul), where the matmul result
/// is used only there, the bias is a vector over its last dimension and act
/// is an epilogueActivation.  A fusion may also yield matmul + bias itself
/// (the pre-activation, which the backward pass reads: the epilogue's aux
/// output).  The matmul gets sharc.fuse_into, `op` a #sharc.gemm_epilogue
/// naming the product and bias operands, the results of the GEMM's output and
/// of the pre-activation, and the activation: the code generator runs the
/// GEMM there.
static void markGemmEpilogues(Block &block) {
  for (Operation &op : block) {
    auto fusion = dyn_cast<FusionOp>(op);
    // The body's ops (the op itself when plain) and what the results yield.
    SmallVector<Operation *, 2> ops;
    SmallVector<Value, 2> yielded;
    if (fusion) {
      Block &body = fusion.getBody().front();
      for (Operation &inner : body.without_terminator())
        ops.push_back(&inner);
      llvm::append_range(yielded, body.getTerminator()->getOperands());
    } else {
      ops.push_back(&op);
      llvm::append_range(yielded, op.getResults());
    }
    if (ops.empty() || ops.size() > 2 || yielded.size() > 2 ||
        llvm::any_of(ops, [](Operation *o) { return o->getNumResults() != 1; }))
      continue;
    Operation *add = isa<AddOp>(ops.front()) ? ops.front() : nullptr;
    Operation *act = ops.back();
    std::optional<GemmActivation> activation = epilogueActivation(act);
    if (!activation)
      act = nullptr;
    // [add], [act] or [add, act reading the add].
    if ((ops.size() == 2 &&
         (!add || !act || act->getOperand(0) != add->getResult(0))) ||
        (ops.size() == 1 && !add && !act))
      continue;
    Value output = (act ? act : add)->getResult(0);
    Value pre = add && act ? add->getResult(0) : Value();
    // Which result of `op` is the GEMM's output, and which its aux.
    int64_t outputResult = -1, auxResult = -1;
    bool other = false; // Yields something else, or a value twice.
    for (auto [i, value] : llvm::enumerate(yielded)) {
      if (value == output && outputResult < 0)
        outputResult = int64_t(i);
      else if (pre && value == pre && auxResult < 0)
        auxResult = int64_t(i);
      else
        other = true;
    }
    if (other || outputResult < 0)
      continue;
    // The operand of `op` that body value `value` is.
    auto operandOf = [&](Value value) -> std::optional<unsigned> {
      if (!fusion) {
        for (OpOperand &use : op.getOpOperands())
          if (use.get() == value)
            return use.getOperandNumber();
        return std::nullopt;
      }
      auto arg = dyn_cast<BlockArgument>(value);
      if (!arg || arg.getOwner() != &fusion.getBody().front())
        return std::nullopt;
      return arg.getArgNumber();
    };
    SmallVector<Value, 2> candidates;
    if (add)
      candidates = {add->getOperand(0), add->getOperand(1)};
    else
      candidates = {act->getOperand(0)};
    auto resultType = cast<RankedTensorType>(output.getType());
    Type element = resultType.getElementType();
    if ((!element.isF32() && !element.isF64()) || resultType.getRank() < 2)
      continue;
    int64_t n = resultType.getShape().back();
    for (auto [i, candidate] : llvm::enumerate(candidates)) {
      std::optional<unsigned> product = operandOf(candidate);
      // The bias operand, or -1 without an add.
      int64_t bias = -1;
      if (add) {
        std::optional<unsigned> other = operandOf(candidates[1 - i]);
        bias = other ? int64_t(*other) : -2;
      }
      if (!product || bias == -2 || bias == int64_t(*product))
        continue;
      Value value = op.getOperand(*product);
      auto matmul = value.getDefiningOp<MatmulOp>();
      if (!matmul || !value.hasOneUse() || matmul->getBlock() != &block ||
          matmul.getType() != resultType)
        continue;
      if (add) {
        auto biasType = cast<RankedTensorType>(op.getOperand(bias).getType());
        if (biasType.getRank() == 0 || biasType.getShape().back() != n ||
            biasType.getNumElements() != n)
          continue;
      }
      MLIRContext *context = op.getContext();
      matmul->setAttr("sharc.fuse_into", UnitAttr::get(context));
      op.setAttr("sharc.gemm_epilogue",
                 GemmEpilogueAttr::get(
                     context, int64_t(*product), bias, outputResult, auxResult,
                     act ? *activation : GemmActivation::none));
      break;
    }
  }
}

/// The strides (in elements) of `transpose`'s dimensions in its operand's
/// row-major memory.
static SmallVector<int64_t> transposedStrides(TransposeOp transpose) {
  SmallVector<int64_t> source = rowMajorStrides(
      cast<RankedTensorType>(transpose.getOperand().getType()).getShape());
  SmallVector<int64_t> strides;
  for (int64_t p : transpose.getPermutation())
    strides.push_back(source[p]);
  return strides;
}

/// True when one of the two matrix (last) dimensions of a view with these
/// strides has unit stride: BLAS can read it with a leading dimension.
static bool hasUnitMatrixStride(ArrayRef<int64_t> strides) {
  size_t r = strides.size();
  return r >= 2 && (strides[r - 1] == 1 || strides[r - 2] == 1);
}

/// Marks transposes that GEMMs read or write in place (the split and merge
/// of attention heads): a transpose of rank >= 3 read only by matmuls, whose
/// matrix dimensions include a unit-stride one, gets sharc.fuse_into (the
/// GEMMs read its operand's memory with strides); a transpose that is the
/// only user of a matmul, whose permuted result keeps the product's columns
/// contiguous, gets sharc.gemm_output and the matmul sharc.fuse_into (the
/// GEMM writes the transpose's memory).
static void markGemmViews(Block &block) {
  for (Operation &op : block) {
    auto transpose = dyn_cast<TransposeOp>(op);
    if (!transpose || transpose.getType().getRank() < 3)
      continue;
    Type element = transpose.getType().getElementType();
    if (!element.isF32() && !element.isF64())
      continue;
    SmallVector<int64_t> strides = transposedStrides(transpose);
    bool readByGemms = !transpose->use_empty() &&
                       llvm::all_of(transpose->getUsers(), [](Operation *user) {
                         return isa<MatmulOp>(user);
                       });
    if (readByGemms && hasUnitMatrixStride(strides)) {
      transpose->setAttr("sharc.fuse_into", UnitAttr::get(op.getContext()));
      continue;
    }
    auto matmul = transpose.getOperand().getDefiningOp<MatmulOp>();
    if (!matmul || !matmul->hasOneUse() || matmul->getBlock() != &block ||
        matmul->hasAttr("sharc.fuse_into"))
      continue;
    // The product's dimension d is the transpose's dimension k with
    // permutation[k] = d: its columns must stay contiguous.
    int64_t rank = transpose.getType().getRank();
    ArrayRef<int64_t> permutation = transpose.getPermutation();
    SmallVector<int64_t> result =
        rowMajorStrides(transpose.getType().getShape());
    SmallVector<int64_t> product(rank);
    for (auto [k, p] : llvm::enumerate(permutation))
      product[p] = result[k];
    if (product[rank - 1] != 1)
      continue;
    matmul->setAttr("sharc.fuse_into", UnitAttr::get(op.getContext()));
    transpose->setAttr("sharc.gemm_output", UnitAttr::get(op.getContext()));
  }
}

LogicalResult sharc::fuseElementwiseOps(func::FuncOp func, bool singletons,
                                        bool rowPrologues, bool gemmFusion) {
  if (func.isExternal())
    return success();
  if (!func.getBody().hasOneBlock())
    return func.emitError() << "sharc-fuse: function '@" << func.getSymName()
                            << "' has " << func.getBody().getBlocks().size()
                            << " blocks; fusion needs a single block";
  // The function's block and the body of every micro-batch loop, each fused
  // on its own.
  SmallVector<Block *> blocks{&func.getBody().front()};
  func.walk([&](MicroBatchLoopOp loop) {
    blocks.push_back(&loop.getBody().front());
  });
  for (Block *block : blocks) {
    if (failed(Fuser(*block, singletons).run()))
      return failure();
    while (rematerializeOnce(*block)) {
    }
    if (rowPrologues)
      markRowPrologues(*block);
    if (gemmFusion) {
      markGemmEpilogues(*block);
      markGemmViews(*block);
    }
  }
  return success();
}

namespace {
struct FusePass : sharc::impl::FuseBase<FusePass> {
  using FuseBase::FuseBase;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (failed(
              fuseElementwiseOps(func, singletons, rowPrologues, gemmFusion)))
        return signalPassFailure();
  }
};
} // namespace

std::unique_ptr<Pass> sharc::createFusePass(bool singletons, bool rowPrologues,
                                            bool gemmFusion) {
  FuseOptions options;
  options.singletons = singletons;
  options.rowPrologues = rowPrologues;
  options.gemmFusion = gemmFusion;
  return createFuse(options);
}
