// The only place that instantiates oneTBB node templates: one multifunction_node type per port
// count (1..kMaxPorts), chosen at run time, plus the sink's function_node.
#include <array>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "framework/api/registry.h"
#include "framework/runtime/pipeline_core.h"

namespace chatflow::detail {
namespace {

template <size_t, class T>
using Repeat = T;

template <size_t PortCount>
class PortedFlowNode final : public FlowNode {
  template <size_t... Index>
  static std::tuple<Repeat<Index, Envelope>...> ports_tuple(std::index_sequence<Index...>);
  using Ports = decltype(ports_tuple(std::make_index_sequence<PortCount>()));
  using Node = tbb::flow::multifunction_node<Envelope, Ports>;
  using OutputPorts = typename Node::output_ports_type;

  template <size_t Index>
  static void put_at(OutputPorts& ports, const Envelope& envelope) {
    std::get<Index>(ports).try_put(envelope);
  }
  template <size_t Index>
  static tbb::flow::sender<Envelope>& sender_at(OutputPorts& ports) {
    return std::get<Index>(ports);
  }
  template <size_t... Index>
  static constexpr auto putters(std::index_sequence<Index...>) {
    return std::array<void (*)(OutputPorts&, const Envelope&), PortCount>{&put_at<Index>...};
  }
  template <size_t... Index>
  static constexpr auto senders(std::index_sequence<Index...>) {
    return std::array<tbb::flow::sender<Envelope>& (*)(OutputPorts&), PortCount>{
        &sender_at<Index>...};
  }
  static constexpr auto kPutters = putters(std::make_index_sequence<PortCount>());
  static constexpr auto kSenders = senders(std::make_index_sequence<PortCount>());

 public:
  PortedFlowNode(tbb::flow::graph& graph, size_t concurrency, NodeBody body, void* runner)
      : node_(graph, concurrency,
              [body, runner](const Envelope& envelope, OutputPorts&) { body(runner, envelope); }) {}

  tbb::flow::receiver<Envelope>& input() override { return node_; }
  tbb::flow::sender<Envelope>& output(PortId port) override {
    return kSenders.at(port)(node_.output_ports());
  }
  void put(PortId port, const Envelope& envelope) override {
    kPutters.at(port)(node_.output_ports(), envelope);
  }

 private:
  Node node_;
};

class TerminalFlowNode final : public FlowNode {
 public:
  TerminalFlowNode(tbb::flow::graph& graph, size_t concurrency, NodeBody body, void* runner)
      : node_(graph, concurrency, [body, runner](const Envelope& envelope) {
          body(runner, envelope);
          return tbb::flow::continue_msg();
        }) {}

  tbb::flow::receiver<Envelope>& input() override { return node_; }
  tbb::flow::sender<Envelope>& output(PortId) override {
    throw std::logic_error("the sink node has no output ports");
  }
  void put(PortId, const Envelope&) override {
    throw std::logic_error("the sink node has no output ports");
  }

 private:
  tbb::flow::function_node<Envelope, tbb::flow::continue_msg> node_;
};

template <size_t... Count>
std::unique_ptr<FlowNode> make_ported(size_t port_count, tbb::flow::graph& graph,
                                      size_t concurrency, NodeBody body, void* runner,
                                      std::index_sequence<Count...>) {
  std::unique_ptr<FlowNode> node;
  ((port_count == Count + 1
        ? (node = std::make_unique<PortedFlowNode<Count + 1>>(graph, concurrency, body, runner),
           true)
        : false) ||
   ...);
  return node;
}

}  // namespace

std::unique_ptr<FlowNode> make_flow_node(tbb::flow::graph& graph, size_t port_count,
                                         size_t concurrency, NodeBody body, void* runner) {
  if (port_count == 0) return std::make_unique<TerminalFlowNode>(graph, concurrency, body, runner);
  if (port_count > kMaxPorts) {
    throw std::invalid_argument("a stage has at most " + std::to_string(kMaxPorts) + " ports");
  }
  return make_ported(port_count, graph, concurrency, body, runner,
                     std::make_index_sequence<kMaxPorts>());
}

}  // namespace chatflow::detail
