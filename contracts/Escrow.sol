// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.30;

/// @notice The parts of an ERC-20 + EIP-3009 stablecoin (USDC) the escrow uses.
interface IStablecoin {
    function transfer(address to, uint256 value) external returns (bool);
    function transferFrom(address from, address to, uint256 value) external returns (bool);
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external;
}

/// @title Escrow
/// @notice Holds callers' deposits of one stablecoin keyed by their address. The gateway's
/// settler charges calls by call id; each call id is settled at most once, ever.
/// @dev Settlement rules (docs: DESIGN.md "Onchain"):
/// - chargeBatch never reverts for one bad charge: a call id already settled emits
///   ChargeSkipped (a retried batch is harmless); a charge above the balance emits
///   ChargeRefused and marks the call id Refused for good, so a replay later gives the same
///   answer rather than silently taking a newer deposit. An operator who wants to re-bill
///   a refused call does so under a new call id.
/// - Withdrawals are two-step: requestWithdrawal, then withdraw after `withdrawalDelay`.
///   The balance stays chargeable meanwhile (calls in flight still settle) and withdraw()
///   pays at most what is left.
/// - The owner manages roles only; neither owner nor settler can move a caller's funds
///   anywhere but to the treasury, and only by a charge event per call id.
/// - What the owner grants takes `roleDelay` to take effect: a settler, a new treasury and a
///   new charge cap are proposed (an event), may be cancelled, and apply only once the delay
///   has run. roleDelay is longer than withdrawalDelay (refused at deployment otherwise), so a
///   caller who sees a proposal can withdraw before it applies: one owner key alone cannot
///   drain the wallets through a fresh settler. Revoking a settler is immediate: it only takes
///   power away, and it is what the owner does first when a settler key leaks.
/// - One charge takes at most `maxCharge`; a larger one is refused with ChargeOverCap and the
///   call id is closed as refused, like a charge above the balance. It bounds what a bad
///   amount (a bug, a leaked settler key) takes per call id.
/// - A call id's status is two bits of a storage word shared with its 127 numeric neighbours
///   (word callId >> 7, bits 2 * (callId & 127)). Any bytes32 is a valid call id; the gateway
///   numbers its calls consecutively, so a batch writes a few words instead of a new slot per
///   call: ~4k gas per charge instead of ~26k.
/// - Assumes a plain stablecoin (no fee on transfer, no rebasing), as USDC is.
contract Escrow {
    uint8 public constant STATUS_NONE = 0;
    uint8 public constant STATUS_CHARGED = 1;
    uint8 public constant STATUS_REFUSED = 2;

    struct Withdrawal {
        uint256 amount;
        uint256 readyAt;
    }

    IStablecoin public immutable token;
    /// @notice Seconds between requestWithdrawal and the earliest withdraw (never 0).
    uint256 public immutable withdrawalDelay;
    /// @notice Seconds between proposing a settler, treasury or charge cap and its earliest effect.
    uint256 public immutable roleDelay;

    address public owner;
    address public pendingOwner;
    address public treasury;
    mapping(address => bool) public isSettler;
    /// @notice Most one charge may take.
    uint256 public maxCharge;
    /// @notice Proposed settler -> when it may be granted (0: not proposed).
    mapping(address => uint256) public settlerReadyAt;
    address public proposedTreasury;
    /// @notice When proposedTreasury may be applied (0: no proposal).
    uint256 public treasuryReadyAt;
    uint256 public proposedMaxCharge;
    /// @notice When proposedMaxCharge may be applied (0: no proposal).
    uint256 public maxChargeReadyAt;
    mapping(address => uint256) public balanceOf;
    /// @dev Call id status words: see the contract's notes and callStatus.
    mapping(uint256 => uint256) private _statusWords;
    mapping(address => Withdrawal) private _withdrawals;

    event Deposited(address indexed account, address indexed from, uint256 amount);
    event Charged(bytes32 indexed callId, address indexed account, uint256 amount);
    event ChargeRefused(bytes32 indexed callId, address indexed account, uint256 amount, uint256 balance);
    /// @notice The amount is above maxCharge; the call id is closed as refused, nothing charged.
    event ChargeOverCap(bytes32 indexed callId, address indexed account, uint256 amount, uint256 maxCharge);
    /// @notice The call id was settled before (status says how); nothing changed.
    event ChargeSkipped(bytes32 indexed callId, address indexed account, uint256 amount, uint8 status);
    event WithdrawalRequested(address indexed account, uint256 amount, uint256 readyAt);
    event WithdrawalCancelled(address indexed account, uint256 amount);
    /// @notice `amount` paid out of `requested` (less when charges landed during the timelock).
    event Withdrawn(address indexed account, uint256 amount, uint256 requested);
    event SettlerProposed(address indexed settler, uint256 readyAt);
    event SettlerProposalCancelled(address indexed settler);
    event SettlerUpdated(address indexed settler, bool enabled);
    /// @notice A new proposal replaces the one pending, if any.
    event TreasuryProposed(address indexed treasury, uint256 readyAt);
    event TreasuryProposalCancelled(address indexed treasury);
    event TreasuryUpdated(address indexed previousTreasury, address indexed treasury);
    /// @notice A new proposal replaces the one pending, if any.
    event MaxChargeProposed(uint256 maxCharge, uint256 readyAt);
    event MaxChargeProposalCancelled(uint256 maxCharge);
    event MaxChargeUpdated(uint256 previousMaxCharge, uint256 maxCharge);
    event OwnershipTransferStarted(address indexed owner, address indexed pendingOwner);
    event OwnershipTransferred(address indexed previousOwner, address indexed newOwner);

    error NotOwner(address caller);
    error NotPendingOwner(address caller);
    error NotSettler(address caller);
    error ZeroAddress();
    error ZeroAmount();
    error ZeroDelay();
    error RoleDelayTooShort(uint256 roleDelay, uint256 withdrawalDelay);
    error NoProposal();
    error ProposalNotReady(uint256 readyAt);
    error LengthMismatch(uint256 callIds, uint256 accounts, uint256 amounts);
    error InsufficientBalance(uint256 balance, uint256 amount);
    error NoWithdrawalRequested(address account);
    error WithdrawalNotReady(uint256 readyAt);
    error TokenCallFailed();

    modifier onlyOwner() {
        if (msg.sender != owner) revert NotOwner(msg.sender);
        _;
    }

    /// @dev The first settler, treasury and cap take effect at once: callers deposit after the deployment.
    constructor(
        address token_,
        address owner_,
        address treasury_,
        address settler_,
        uint256 withdrawalDelay_,
        uint256 roleDelay_,
        uint256 maxCharge_
    ) {
        if (token_ == address(0) || owner_ == address(0) || treasury_ == address(0)) revert ZeroAddress();
        // A withdrawal timelock of 0 would let a caller leave with money its calls in flight still owe.
        if (withdrawalDelay_ == 0) revert ZeroDelay();
        if (roleDelay_ <= withdrawalDelay_) revert RoleDelayTooShort(roleDelay_, withdrawalDelay_);
        if (maxCharge_ == 0) revert ZeroAmount();
        token = IStablecoin(token_);
        withdrawalDelay = withdrawalDelay_;
        roleDelay = roleDelay_;
        owner = owner_;
        treasury = treasury_;
        maxCharge = maxCharge_;
        emit OwnershipTransferred(address(0), owner_);
        emit TreasuryUpdated(address(0), treasury_);
        emit MaxChargeUpdated(0, maxCharge_);
        if (settler_ != address(0)) {
            isSettler[settler_] = true;
            emit SettlerUpdated(settler_, true);
        }
    }

    // ---- deposits ----

    function deposit(uint256 amount) external {
        _pull(msg.sender, amount);
        _credit(msg.sender, msg.sender, amount);
    }

    function depositFor(address account, uint256 amount) external {
        if (account == address(0)) revert ZeroAddress();
        _pull(msg.sender, amount);
        _credit(account, msg.sender, amount);
    }

    /// @notice Gasless deposit: anyone may submit `from`'s EIP-3009 ReceiveWithAuthorization
    /// (to = this escrow); the funds are always credited to `from`. receiveWithAuthorization
    /// only accepts the payee as caller, so a front-runner cannot spend the signature elsewhere.
    function depositWithAuthorization(
        address from,
        uint256 amount,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        if (amount == 0) revert ZeroAmount();
        token.receiveWithAuthorization(from, address(this), amount, validAfter, validBefore, nonce, v, r, s);
        _credit(from, from, amount);
    }

    // ---- settlement ----

    /// @notice Charge calls by id; one Charged, ChargeRefused, ChargeOverCap or ChargeSkipped event per entry.
    /// @return total The amount moved to the treasury by this batch.
    function chargeBatch(bytes32[] calldata callIds, address[] calldata accounts, uint256[] calldata amounts)
        external
        returns (uint256 total)
    {
        if (!isSettler[msg.sender]) revert NotSettler(msg.sender);
        uint256 n = callIds.length;
        if (accounts.length != n || amounts.length != n) {
            revert LengthMismatch(n, accounts.length, amounts.length);
        }
        // The status word in use is kept in memory while consecutive call ids share it, and
        // stored when the batch moves to another word. A word key (callId >> 7) is below 2^249,
        // so none equals the starting sentinel.
        uint256 key = type(uint256).max;
        uint256 word;
        bool dirty;
        uint256 cap = maxCharge; // read once per batch
        for (uint256 i; i < n; ++i) {
            bytes32 callId = callIds[i];
            address account = accounts[i];
            uint256 amount = amounts[i];
            uint256 id = uint256(callId);
            if (id >> 7 != key) {
                if (dirty) _statusWords[key] = word;
                key = id >> 7;
                word = _statusWords[key];
                dirty = false;
            }
            uint256 shift = (id & 127) << 1;
            uint8 status = uint8((word >> shift) & 3);
            if (status != STATUS_NONE) {
                emit ChargeSkipped(callId, account, amount, status);
                continue;
            }
            dirty = true;
            if (amount > cap) {
                word |= uint256(STATUS_REFUSED) << shift;
                emit ChargeOverCap(callId, account, amount, cap);
                continue;
            }
            uint256 balance = balanceOf[account];
            if (amount > balance) {
                word |= uint256(STATUS_REFUSED) << shift;
                emit ChargeRefused(callId, account, amount, balance);
                continue;
            }
            word |= uint256(STATUS_CHARGED) << shift;
            unchecked {
                // amount <= balance, and the sum of charges is bounded by the escrow's holdings.
                balanceOf[account] = balance - amount;
                total += amount;
            }
            emit Charged(callId, account, amount);
        }
        if (dirty) _statusWords[key] = word;
        if (total != 0) _pay(treasury, total);
    }

    /// @notice STATUS_NONE, STATUS_CHARGED or STATUS_REFUSED.
    function callStatus(bytes32 callId) public view returns (uint8) {
        uint256 id = uint256(callId);
        return uint8((_statusWords[id >> 7] >> ((id & 127) << 1)) & 3);
    }

    function isCharged(bytes32 callId) external view returns (bool) {
        return callStatus(callId) == STATUS_CHARGED;
    }

    // ---- withdrawals ----

    /// @notice Start (or restart, replacing the previous request) the withdrawal timelock.
    function requestWithdrawal(uint256 amount) external {
        if (amount == 0) revert ZeroAmount();
        uint256 balance = balanceOf[msg.sender];
        if (amount > balance) revert InsufficientBalance(balance, amount);
        uint256 readyAt = block.timestamp + withdrawalDelay;
        _withdrawals[msg.sender] = Withdrawal(amount, readyAt);
        emit WithdrawalRequested(msg.sender, amount, readyAt);
    }

    function cancelWithdrawal() external {
        uint256 amount = _withdrawals[msg.sender].amount;
        if (amount == 0) revert NoWithdrawalRequested(msg.sender);
        delete _withdrawals[msg.sender];
        emit WithdrawalCancelled(msg.sender, amount);
    }

    /// @notice Pay out the requested amount, capped at the balance left after charges.
    function withdraw() external returns (uint256 paid) {
        Withdrawal memory w = _withdrawals[msg.sender];
        if (w.amount == 0) revert NoWithdrawalRequested(msg.sender);
        if (block.timestamp < w.readyAt) revert WithdrawalNotReady(w.readyAt);
        delete _withdrawals[msg.sender];
        uint256 balance = balanceOf[msg.sender];
        paid = w.amount < balance ? w.amount : balance;
        balanceOf[msg.sender] = balance - paid;
        emit Withdrawn(msg.sender, paid, w.amount);
        if (paid != 0) _pay(msg.sender, paid);
    }

    function pendingWithdrawal(address account) external view returns (uint256 amount, uint256 readyAt) {
        Withdrawal memory w = _withdrawals[account];
        return (w.amount, w.readyAt);
    }

    // ---- roles ----

    /// @notice Announce a settler; grantSettler makes it one after roleDelay.
    function proposeSettler(address settler) external onlyOwner {
        if (settler == address(0)) revert ZeroAddress();
        uint256 readyAt = block.timestamp + roleDelay;
        settlerReadyAt[settler] = readyAt;
        emit SettlerProposed(settler, readyAt);
    }

    function cancelSettlerProposal(address settler) external onlyOwner {
        if (settlerReadyAt[settler] == 0) revert NoProposal();
        delete settlerReadyAt[settler];
        emit SettlerProposalCancelled(settler);
    }

    function grantSettler(address settler) external onlyOwner {
        _ready(settlerReadyAt[settler]);
        delete settlerReadyAt[settler];
        isSettler[settler] = true;
        emit SettlerUpdated(settler, true);
    }

    /// @notice Immediate, and drops the address's pending proposal too.
    function revokeSettler(address settler) external onlyOwner {
        if (settlerReadyAt[settler] != 0) {
            delete settlerReadyAt[settler];
            emit SettlerProposalCancelled(settler);
        }
        isSettler[settler] = false;
        emit SettlerUpdated(settler, false);
    }

    /// @notice Announce a new treasury; applyTreasury moves it there after roleDelay.
    function proposeTreasury(address treasury_) external onlyOwner {
        if (treasury_ == address(0)) revert ZeroAddress();
        uint256 readyAt = block.timestamp + roleDelay;
        proposedTreasury = treasury_;
        treasuryReadyAt = readyAt;
        emit TreasuryProposed(treasury_, readyAt);
    }

    function cancelTreasuryProposal() external onlyOwner {
        if (treasuryReadyAt == 0) revert NoProposal();
        emit TreasuryProposalCancelled(proposedTreasury);
        delete proposedTreasury;
        delete treasuryReadyAt;
    }

    function applyTreasury() external onlyOwner {
        _ready(treasuryReadyAt);
        emit TreasuryUpdated(treasury, proposedTreasury);
        treasury = proposedTreasury;
        delete proposedTreasury;
        delete treasuryReadyAt;
    }

    /// @notice Announce a new per-charge cap; applyMaxCharge sets it after roleDelay.
    function proposeMaxCharge(uint256 maxCharge_) external onlyOwner {
        if (maxCharge_ == 0) revert ZeroAmount();
        uint256 readyAt = block.timestamp + roleDelay;
        proposedMaxCharge = maxCharge_;
        maxChargeReadyAt = readyAt;
        emit MaxChargeProposed(maxCharge_, readyAt);
    }

    function cancelMaxChargeProposal() external onlyOwner {
        if (maxChargeReadyAt == 0) revert NoProposal();
        emit MaxChargeProposalCancelled(proposedMaxCharge);
        delete proposedMaxCharge;
        delete maxChargeReadyAt;
    }

    function applyMaxCharge() external onlyOwner {
        _ready(maxChargeReadyAt);
        emit MaxChargeUpdated(maxCharge, proposedMaxCharge);
        maxCharge = proposedMaxCharge;
        delete proposedMaxCharge;
        delete maxChargeReadyAt;
    }

    /// @notice Two-step transfer: the new owner must call acceptOwnership (guards against typos).
    function transferOwnership(address newOwner) external onlyOwner {
        pendingOwner = newOwner;
        emit OwnershipTransferStarted(owner, newOwner);
    }

    function acceptOwnership() external {
        if (msg.sender != pendingOwner) revert NotPendingOwner(msg.sender);
        emit OwnershipTransferred(owner, msg.sender);
        owner = msg.sender;
        pendingOwner = address(0);
    }

    // ---- internals ----

    // A proposal exists (readyAt != 0) and its delay has run.
    function _ready(uint256 readyAt) private view {
        if (readyAt == 0) revert NoProposal();
        if (block.timestamp < readyAt) revert ProposalNotReady(readyAt);
    }

    function _credit(address account, address from, uint256 amount) private {
        balanceOf[account] += amount;
        emit Deposited(account, from, amount);
    }

    function _pull(address from, uint256 amount) private {
        if (amount == 0) revert ZeroAmount();
        _tokenCall(abi.encodeCall(IStablecoin.transferFrom, (from, address(this), amount)));
    }

    function _pay(address to, uint256 amount) private {
        _tokenCall(abi.encodeCall(IStablecoin.transfer, (to, amount)));
    }

    // Bubbles the token's own revert (e.g. InsufficientBalance) and accepts tokens that
    // return nothing, like SafeERC20.
    function _tokenCall(bytes memory data) private {
        (bool ok, bytes memory ret) = address(token).call(data);
        if (!ok) {
            assembly ("memory-safe") {
                revert(add(ret, 32), mload(ret))
            }
        }
        if (ret.length == 0 ? address(token).code.length == 0 : !abi.decode(ret, (bool))) revert TokenCallFailed();
    }
}
